"""Consumer groups of the consumer group protocol (KIP-848): records, assignors, reconciliation, the manager."""
