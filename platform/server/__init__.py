"""ember.server — the broker process: the composition root that builds the core, the coordinator,
both listeners and the metrics service, and runs them (``ember broker start``)."""
