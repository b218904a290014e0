"""ember.ingest — the ingestion tier, i.e. the broker core: partitions, replicas, ISR, produce and
fetch at leaders, inter-broker replication. Both protocols translate onto it."""
