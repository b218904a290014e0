"""SASL authentication: SCRAM and PLAIN on both protocols, users' SCRAM credentials in ZooKeeper."""
