"""Several coordinator processes as one coordinator: how the group shards are divided (topology.py), the process
model of `serve --workers N` (supervisor.py), one ordered connection to a peer (upstream.py), group requests relayed
to the peer owning the group (relay.py), and data-plane requests forwarded to the process that has the topics
(forwarding.py)."""
