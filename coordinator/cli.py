"""Command line: `kafka-group-coordinator serve [...]` (the same as `python -m coordinator serve [...]`), and
`kafka-group-coordinator groups list | describe G | timeline G | reset-offsets G ... | delete G` over a running
server's admin API (coordinator.admin.cli)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from coordinator.config import Config, ConfigError

WORKER_SPEC_ENV = "KGC_WORKER_SPEC"  # set by `serve --workers N`'s supervisor for each worker it starts


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafka-group-coordinator")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the server")
    serve.add_argument(
        "--listen",
        default=os.environ.get("KGC_LISTEN", "0.0.0.0:9092"),
        help="Kafka listener HOST:PORT (port 0 picks a free port)",
    )
    serve.add_argument(
        "--advertised-listener",
        default=os.environ.get("KGC_ADVERTISED_LISTENER"),
        help="HOST:PORT clients are told to connect to (default: the address they reached)",
    )
    serve.add_argument("--data-dir", default=os.environ.get("KGC_DATA_DIR", "./data"))
    serve.add_argument(
        "--admin-listen",
        default=os.environ.get("KGC_ADMIN_LISTEN", "0.0.0.0:9464"),
        help="admin/metrics HTTP HOST:PORT, or 'off'",
    )
    serve.add_argument("--config", default=os.environ.get("KGC_CONFIG"), help="a properties file")
    serve.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a setting")
    serve.add_argument("--log-level", default=os.environ.get("KGC_LOG_LEVEL", "INFO"))
    serve.add_argument(
        "--workers",
        default=os.environ.get("KGC_COORDINATOR_WORKERS"),
        metavar="N|auto",
        help="worker processes, each owning a share of the group shards behind its own listener "
        "(default: the setting coordinator.workers, auto: one per core)",
    )
    from coordinator.admin import cli as groups_cli

    groups_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve" and "kio" not in sys.modules:
        # kio imports Hypothesis whenever it is installed (a test dependency), only to register test strategies
        # for its types; a server never uses them and the import costs ~0.3 s of start-up (measured).
        sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]  # None: a blocked import
    if args.command == "groups":
        from coordinator.admin import cli as groups_cli

        return groups_cli.run(args)
    if args.command == "serve" and os.environ.get(WORKER_SPEC_ENV):
        return _serve_worker(args, os.environ[WORKER_SPEC_ENV])
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "serve":
        from coordinator.config import parse_hostport

        try:
            config = Config.load(args.config, overrides=args.set)
        except (ConfigError, OSError) as exc:
            print(f"kafka-group-coordinator: {exc}", file=sys.stderr)
            return 2
        listen = parse_hostport(args.listen, 9092)
        admin = None if args.admin_listen == "off" else parse_hostport(args.admin_listen, 9464)
        advertised = parse_hostport(args.advertised_listener, 9092) if args.advertised_listener else None
        os.makedirs(args.data_dir, exist_ok=True)
        from coordinator.cluster import topology

        try:
            count = topology.resolve_workers(args.workers, config)
        except ValueError as exc:
            print(f"kafka-group-coordinator: {exc}", file=sys.stderr)
            return 2
        if count > 1:
            from coordinator.cluster.supervisor import Supervisor
            from coordinator.security.listeners import ListenerConfigError, parse_listeners

            try:
                named = parse_listeners(config["listeners"], config["listener.security.protocol.map"])
            except (ListenerConfigError, ValueError) as exc:
                print(f"kafka-group-coordinator: {exc}", file=sys.stderr)
                return 2
            shared = bool(config["upstream.bootstrap.servers"])
            if shared and len(named) > 1:
                print(
                    "kafka-group-coordinator: in front of an upstream cluster, several workers take one listener",
                    file=sys.stderr,
                )
                return 2
            supervisor = Supervisor(
                count,
                sys.argv[1:] if argv is None else argv,
                listen,
                admin,
                config["shutdown.timeout.ms"] / 1000,
                listeners=[(spec.name, spec.host, spec.port) for spec in named],
                shared=shared,
            )
            return supervisor.run()
        from coordinator import app  # not before: a supervisor does not need it

        try:
            built = app.build(config, listen, admin, advertised, args.data_dir)
        except ValueError as exc:  # settings that do not go together (the front with several listeners)
            print(f"kafka-group-coordinator: {exc}", file=sys.stderr)
            return 2
        try:
            app.run(built)
        except _start_errors() as exc:
            # a listener that cannot be bound; in front of a cluster: refused credentials, an unusable state topic
            print(f"kafka-group-coordinator: {exc}", file=sys.stderr)
            return 1
    return 0


def _serve_worker(args: argparse.Namespace, spec_json: str) -> int:
    """One worker of `serve --workers N`, started by the supervisor (coordinator.cluster.supervisor)."""
    from coordinator import app
    from coordinator.cluster.supervisor import die_with_parent
    from coordinator.cluster.topology import WorkerSpec
    from coordinator.config import parse_hostport

    spec = WorkerSpec.from_json(spec_json)
    die_with_parent(spec.supervisor_pid)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s worker={spec.index} %(name)s: %(message)s",
    )
    config = Config.load(args.config, overrides=args.set)
    advertised = parse_hostport(args.advertised_listener, 9092) if args.advertised_listener else None
    listen = (spec.host, spec.kafka_ports[spec.index])
    errors: tuple[type[BaseException], ...] = ()  # an embedded worker's sockets are bound by its supervisor
    if config["upstream.bootstrap.servers"]:
        # an instance on the shared socket, with the port asked for (0: its broker ports are free ones,
        # coordinator.front.dataplane), which says why it cannot start as one process does
        listen = parse_hostport(args.listen, 9092)
        errors = _start_errors()
    try:
        app.run(
            app.build(config, listen, None, advertised, args.data_dir, placement=spec),
            notify_fd=spec.notify_fd,
        )
    except errors as exc:
        # the supervisor then restarts the worker, or gives up before the announce line
        print(f"kafka-group-coordinator: worker {spec.index}: {exc}", file=sys.stderr)
        return 1
    return 0


def _start_errors() -> tuple[type[BaseException], ...]:
    """What stops a server from starting with a message rather than a traceback: a listener that cannot be bound;
    in front of a cluster, refused credentials or an unusable state topic."""
    from coordinator.brokers import ListenError
    from coordinator.front.connect import UpstreamAuthError
    from coordinator.front.state import StateTopicError

    return ListenError, UpstreamAuthError, StateTopicError
