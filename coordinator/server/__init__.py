"""The only package that imports asyncio/uvloop: listener, connections, admin HTTP and the shard runtime."""
