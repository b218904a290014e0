"""What the SASL cluster tests share: client settings for a user of a ``LocalCluster(secure=True,
sasl=True)`` (ember's and confluent-kafka's), the TLS context of a raw client, topics and ACLs made
as the admin user."""
from __future__ import annotations

import ssl

from ember.client import Admin
from ember.launcher.local import LocalCluster
from ember.security.authorizer.model import AccessControlEntry, AclBinding, Operation, Permission, ResourcePattern, ResourceType


def login(cluster: LocalCluster, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, object]:
    return {**cluster.client_options, "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password}


def kafka_config(cluster: LocalCluster, user: str, password: str, mechanism: str = "SCRAM-SHA-256",
                 protocol: str = "SASL_SSL") -> dict[str, object]:
    tls = cluster.tls
    config = {"bootstrap.servers": cluster.kafka_bootstrap, "security.protocol": protocol,
              "ssl.ca.location": str(tls.ca), "ssl.certificate.location": str(tls.client.cert),
              "ssl.key.location": str(tls.client.key)}
    if protocol.startswith("SASL"):
        config.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return config


def create(cluster: LocalCluster, topic: str) -> None:
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=2)


def grant(cluster: LocalCluster, principal: str, topic: str, *operations: Operation) -> None:
    """ACLs are on (cluster up --secure): a user other than admin needs them."""
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        admin.create_acls([AclBinding(ResourcePattern(ResourceType.TOPIC, topic),
                                      AccessControlEntry(principal, "*", operation, Permission.ALLOW))
                           for operation in operations])


def tls_context(cluster: LocalCluster) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cluster.tls.ca))
    context.load_cert_chain(cluster.tls.client.cert, cluster.tls.client.key)
    return context
