"""TLS for a local cluster (``ember cluster up --secure``): a CA, one broker certificate (SAN
127.0.0.1 and localhost, also the brokers' client certificate between themselves and towards
ZooKeeper), a ZooKeeper certificate and a client certificate under ``<data>/tls/``; the broker
properties that put every listener and the ZooKeeper session on TLS with client certificates
required, and the client configuration files printed for users.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from ember.launcher.cluster_sasl import ClusterSasl
from ember.launcher.zookeeper_server import ZooKeeperServer
from ember.security.certificates import LOCAL_HOSTS, CertificateAuthority, IssuedCertificate
from ember.security.client import ClientSecurity
from ember.security.private_files import write_private
from ember.security.protocol import SecurityProtocol
from ember.security.session import certificate_principal


def certificate_file_principal(path: Path) -> str:
    """The principal a broker sees for the holder of the (first) certificate in PEM file ``path``."""
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return certificate_principal(cert.public_bytes(serialization.Encoding.DER))

BROKER_NAME = "ember-broker"
ACL_AUTHORIZER = "ember.security.authorizer.AclAuthorizer"
CLIENT_NAME = "ember-client"


@dataclass(frozen=True)
class ClusterTls:
    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def _issued(self, name: str) -> IssuedCertificate:
        return IssuedCertificate(self.directory / f"{name}.pem", self.directory / f"{name}-key.pem",
                                 self.directory / f"{name}-keystore.pem")

    @property
    def broker(self) -> IssuedCertificate:
        return self._issued("broker")

    @property
    def client(self) -> IssuedCertificate:
        return self._issued("client")

    @classmethod
    def create(cls, directory: Path) -> "ClusterTls":
        """A new CA and its certificates; an existing set is kept (brokers restart with it)."""
        tls = cls(directory)
        if not tls.ca.exists():
            authority = CertificateAuthority.create(directory)
            authority.issue("broker", BROKER_NAME, LOCAL_HOSTS)
            authority.issue("zookeeper", "ember-zookeeper", LOCAL_HOSTS)
            authority.issue("client", CLIENT_NAME)
        return tls

    def zookeeper_server(self, data_dir: Path, port: int) -> ZooKeeperServer:
        """A ZooKeeper server serving only TLS on ``port``."""
        return ZooKeeperServer(data_dir, port, keystore=self._issued("zookeeper").keystore, truststore=self.ca)

    def broker_properties(self, listeners: tuple[str, ...]) -> dict[str, str]:
        """Every listener on TLS, client certificates required, brokers authenticated the same way;
        the authorizer on, with the broker and client certificates' principals as super users."""
        return {"listener.security.protocol.map": ",".join(f"{name}:SSL" for name in listeners),
                "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.broker.keystore),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca),
                "ssl.client.auth": "required",
                "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.keystore.location": str(self.broker.keystore),
                "zookeeper.ssl.truststore.location": str(self.ca),
                # ACLs on; the brokers (replication) and the client certificate's holder (the admin) are super users
                "authorizer.class.name": ACL_AUTHORIZER,
                "super.users": f"{certificate_file_principal(self.broker.cert)};{certificate_file_principal(self.client.cert)}"}

    def client_security(self) -> ClientSecurity:
        """What an ember client of this cluster sets (the client certificate, the cluster's CA)."""
        return ClientSecurity(SecurityProtocol.SSL, str(self.ca), str(self.client.cert), str(self.client.key))

    def write_client_configs(self, bootstrap: str, kafka_bootstrap: str,
                             sasl: ClusterSasl | None = None) -> dict[str, Path]:
        """Client configuration files, by what reads them: ``ember`` (JSON of ember client keywords),
        ``java`` (client.properties: Kafka's tools, ``ember --command-config``) and ``librdkafka``;
        with ``sasl``, each also logs in as the cluster's admin user (so each is owner-only)."""
        security = self.client_security()
        ember = {"bootstrap_servers": bootstrap, **security.options(), **(sasl.client_options() if sasl else {})}
        java = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": self.ca,
                "ssl.keystore.type": "PEM", "ssl.keystore.location": self.client.keystore,
                **(sasl.java_properties() if sasl else {})}
        librdkafka = {"bootstrap.servers": kafka_bootstrap, "security.protocol": "ssl", "ssl.ca.location": self.ca,
                      "ssl.certificate.location": self.client.cert, "ssl.key.location": self.client.key,
                      **(sasl.librdkafka_properties() if sasl else {})}
        files = {"ember": self.directory / "client.json", "java": self.directory / "client.properties",
                 "librdkafka": self.directory / "librdkafka.properties"}
        write_private(files["ember"], json.dumps(ember, indent=2) + "\n")
        write_private(files["java"], "".join(f"{k}={v}\n" for k, v in java.items()))
        write_private(files["librdkafka"], "".join(f"{k}={v}\n" for k, v in librdkafka.items()))
        return files
