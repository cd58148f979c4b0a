"""The admin side of the server: the HTTP API (/healthz, /readyz, /metrics, /v1; http.py), the planning of offset
resets (reset.py), worker 0's front for the other workers (peers.py), and the `groups` command line that talks to
the HTTP API (cli.py)."""
