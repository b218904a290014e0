"""ember.metrics: the broker's Prometheus metrics, health checks and their HTTP endpoint."""
