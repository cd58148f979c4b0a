"""Committed offsets and their retention (KIP-211): the store replayed from the log, and the offset APIs."""

from .manager import OffsetMetadataManager
from .store import OffsetAndMetadata, OffsetStore, PartitionOffsets

__all__ = ["OffsetAndMetadata", "OffsetMetadataManager", "OffsetStore", "PartitionOffsets"]
