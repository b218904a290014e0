"""Kafka's wire protocol on top of the shared broker core (docs/protocol.md, "Kafka protocol")."""
