"""In front of an existing Kafka cluster (`upstream.bootstrap.servers`): clients change only their
`bootstrap.servers`; their records stay in their cluster (coordinator.front.dataplane forwards everything that is not
group coordination to its brokers), groups are coordinated here and their offsets kept in the cluster too
(coordinator.front.groups). See docs/front.md."""
