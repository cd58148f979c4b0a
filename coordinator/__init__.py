"""The application: group coordination, committed offsets, the data plane, the server and the CLI."""
