"""ember.metrics — the broker's Prometheus instruments (Kafka's metric names), the request
observer, ZooKeeper probes and the HTTP endpoint; wired together by ``ember.server``."""
