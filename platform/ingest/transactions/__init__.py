"""Kafka transactions' coordinator side: transaction metadata, its ZooKeeper store, the
coordinator and the routing of transaction markers to partition leaders."""
