"""ember.zk — the ZooKeeper session (bounded calls, reconnects, TLS) and the znode layout every
ZooKeeper user (cluster metadata, groups, security stores, metrics probes) shares."""
