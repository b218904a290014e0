"""ember.groups — the broker-side group coordinator: membership and rebalances, server-side
assignment, committed offsets and their ZooKeeper store. The client half is ``ember.client``."""
