"""ember.cluster — cluster metadata in ZooKeeper: topic and partition records, the metadata cache,
broker registration, topic administration, producer-id blocks and the controller (elections,
reassignments)."""
