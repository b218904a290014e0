"""A small certificate authority for local clusters and tests (``ember cluster up --secure``).

Certificates are PEM files, what every client here reads: Python's ``ssl``, librdkafka's
``ssl.ca.location`` and Java's ``ssl.truststore.type=PEM``. Keys are EC P-256 in PKCS#8 (the
form Kafka's PEM keystore and ZooKeeper's PEM reader require). A *keystore* file holds the
private key followed by the certificate chain, Kafka's ``ssl.keystore.type=PEM`` layout.
"""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ember.security.private_files import write_private

#: How long issued certificates are valid; rotate before (docs/security.md).
VALIDITY = datetime.timedelta(days=365)
LOCAL_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class IssuedCertificate:
    """Files of one issued certificate: ``cert`` (leaf then CA), ``key``, and ``keystore``
    (key + chain in one file, Kafka's PEM keystore)."""
    cert: Path
    key: Path
    keystore: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ember"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption = serialization.BestAvailableEncryption(password.encode()) if password \
        else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _san(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


class CertificateAuthority:
    """A self-signed CA that issues broker and client certificates into ``directory``."""

    def __init__(self, directory: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self.directory = directory
        self._key = key
        self._cert = cert

    @property
    def cert_path(self) -> Path:
        return self.directory / "ca.pem"

    @classmethod
    def create(cls, directory: Path, name: str = "ember local CA") -> "CertificateAuthority":
        """A new CA; writes ``ca.pem`` (what clients trust) and ``ca-key.pem`` (owner-only)."""
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        public = key.public_key()
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                .public_key(public).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
                .sign(key, hashes.SHA256()))
        authority = cls(directory, key, cert)
        authority.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_private(directory / "ca-key.pem", _pem_key(key, None))
        return authority

    @classmethod
    def load(cls, directory: Path) -> "CertificateAuthority":
        """The CA ``create`` wrote to ``directory`` (to issue more, or renewed, certificates)."""
        key = serialization.load_pem_private_key((directory / "ca-key.pem").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cls(directory, key, x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes()))

    def issue(self, name: str, common_name: str, hosts: tuple[str, ...] = (),
              password: str | None = None) -> IssuedCertificate:
        """A certificate for ``common_name`` usable as TLS server (for ``hosts``, its SAN) and
        client; writes ``NAME.pem``, ``NAME-key.pem`` and ``NAME-keystore.pem`` (key encrypted
        with ``password`` when given)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(self._cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                                content_commitment=False, data_encipherment=False,
                                                key_agreement=True, key_cert_sign=False, crl_sign=False,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                                  critical=False))
        if hosts:
            builder = builder.add_extension(_san(hosts), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        chain = cert.public_bytes(serialization.Encoding.PEM) + self._cert.public_bytes(serialization.Encoding.PEM)
        key_pem = _pem_key(key, password)
        issued = IssuedCertificate(self.directory / f"{name}.pem", self.directory / f"{name}-key.pem",
                                   self.directory / f"{name}-keystore.pem")
        issued.cert.write_bytes(chain)
        write_private(issued.key, key_pem)
        write_private(issued.keystore, key_pem + chain)
        return issued
