"""Authorization with Kafka's ACLs: the model, the decision (:class:`Authorizer`), the ZooKeeper
store that keeps every broker's copy current, and the checks request handling makes (:class:`Access`)."""
