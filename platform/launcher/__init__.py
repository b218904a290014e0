"""ember.launcher — the development cluster: a real ZooKeeper and broker processes on loopback
(``ember cluster up``), their TLS/SASL set-up and the tools that watch them (scrape, top)."""
