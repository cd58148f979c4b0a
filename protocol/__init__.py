"""Bytes <-> Kafka messages: framing, headers, the API table and the consumer-protocol codecs.

Built on kio's generated entities. This package imports nothing else of ours.
"""
