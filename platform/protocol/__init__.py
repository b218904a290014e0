"""The wire protocols a broker speaks: ``ember`` (its own, JSON headers + Arrow payloads, used by
ember's clients, replication and the Spark source) and ``kafka`` (Kafka's, for every Kafka
client and tool). Both translate requests into calls on the shared broker core, ``ember.ingest``."""
