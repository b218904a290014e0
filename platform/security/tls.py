"""TLS contexts from Kafka's ``ssl.*`` settings, in PEM form.

A broker's listener with security protocol SSL serves TLS with :meth:`TlsSettings.server_context`;
the same settings make a broker's *client* context (:meth:`TlsSettings.client_context`) when it
connects to another broker's inter-broker listener. Kafka's names, PEM only:
``ssl.keystore.location`` (one file: PKCS#8 private key and certificate chain) or the inline
``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (KIP-651), ``ssl.key.password``,
``ssl.truststore.location`` or inline ``ssl.truststore.certificates`` (CA certificates),
``ssl.client.auth``, ``ssl.enabled.protocols``, ``ssl.cipher.suites`` (OpenSSL names; TLS 1.3 suites
are not configurable from Python) and ``ssl.endpoint.identification.algorithm``.
Secrets (key, password) never appear in a message or a repr.
"""
from __future__ import annotations

import re
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ember.errors import InvalidConfig
from ember.wire.config_def import ConfigDef

#: TLS versions ember serves; older ones are insecure and refused.
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def _text(name: str, doc: str, default: Optional[str] = None, **kw: Any) -> ConfigDef:
    return ConfigDef(name, "string", default, doc, nullable=True, **kw)


#: Kafka's ssl.* properties; each may also be set per listener as ``listener.name.<name>.<property>``.
SSL_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in (
    ConfigDef("ssl.keystore.type", "string", "PEM", "Format of the keystore (PEM only).",
              choices=("PEM",), unsupported=("JKS", "PKCS12")),
    _text("ssl.keystore.location", "PEM file with the private key (PKCS#8) and the certificate chain."),
    _text("ssl.keystore.certificate.chain", "Inline PEM certificate chain (with ssl.keystore.key), "
          "instead of ssl.keystore.location."),
    _text("ssl.keystore.key", "Inline PEM private key (PKCS#8), instead of ssl.keystore.location.", secret=True),
    _text("ssl.key.password", "Password of an encrypted private key.", secret=True),
    ConfigDef("ssl.truststore.type", "string", "PEM", "Format of the truststore (PEM only).",
              choices=("PEM",), unsupported=("JKS", "PKCS12")),
    _text("ssl.truststore.location", "PEM file of the CA certificates trusted for peers' certificates."),
    _text("ssl.truststore.certificates", "Inline PEM CA certificates, instead of ssl.truststore.location."),
    ConfigDef("ssl.client.auth", "string", "none", "Whether clients must present a certificate the "
              "truststore verifies: none, requested (verified if presented) or required.",
              choices=tuple(CLIENT_AUTH)),
    ConfigDef("ssl.enabled.protocols", "string", "TLSv1.2,TLSv1.3", "TLS versions served and used "
              "(TLSv1.2 and/or TLSv1.3; older versions are insecure and refused)."),
    _text("ssl.cipher.suites", "TLS 1.2 cipher suites, OpenSSL names separated by commas (unset: "
          "Python's secure defaults)."),
    _text("ssl.endpoint.identification.algorithm", "https: a broker connecting to another checks that "
          "its certificate names the host it dialled; empty: no check.", "https", choices=("https",)),
    ConfigDef("ssl.principal.mapping.rules", "string", "DEFAULT", "How a client certificate becomes a "
              "principal: DEFAULT = User:<subject DN, RFC 2253> (custom rules are not supported yet).",
              choices=("DEFAULT",)),
    ConfigDef("ssl.handshake.timeout.ms", "int", 10000, "How long a TLS handshake may take before the "
              "connection is closed (ember's setting).", minimum=1, maximum=(1 << 31) - 1),
)}


def _normalized_pem(text: str, what: str) -> str:
    """PEM blocks re-wrapped at 64 columns, so inline values written on one line (as properties
    files hold them) load too."""
    blocks = _PEM_BLOCK.findall(text)
    if not blocks:
        raise InvalidConfig(f"{what} holds no PEM block (-----BEGIN ...-----)")
    out = []
    for kind, body in blocks:
        data = re.sub(r"\s+", "", body)
        out.append(f"-----BEGIN {kind}-----\n"
                   + "".join(data[i:i + 64] + "\n" for i in range(0, len(data), 64))
                   + f"-----END {kind}-----\n")
    return "".join(out)


def _no_password() -> str:
    raise InvalidConfig("the private key is encrypted: set its password (ssl.key.password / ssl_password)")


def load_cert_chain(context: ssl.SSLContext, certfile: str | Path, keyfile: str | Path | None,
                    password: Optional[str], what: str) -> None:
    """Load a certificate chain and key; the error names the files, never the password."""
    for path in (certfile, keyfile):
        if path is not None and not Path(path).is_file():
            raise InvalidConfig(f"{what}: no such file {path}")
    try:
        context.load_cert_chain(certfile, keyfile, password if password is not None else _no_password)
    except ssl.SSLError as exc:
        raise InvalidConfig(f"{what}: cannot load the certificate and private key from "
                            f"{certfile}{'' if keyfile is None else ' and ' + str(keyfile)} ({exc.reason or exc}); "
                            f"they must be PEM (key in PKCS#8) and the password must match") from None


def load_trust(context: ssl.SSLContext, cafile: str | Path | None, cadata: str | None, what: str) -> None:
    """Trust these CA certificates (a file or inline PEM) instead of the system's."""
    if cafile is not None and not Path(cafile).is_file():
        raise InvalidConfig(f"{what}: no such file {cafile}")
    try:
        context.load_verify_locations(cafile=cafile, cadata=_normalized_pem(cadata, what) if cadata else None)
    except ssl.SSLError as exc:
        raise InvalidConfig(f"{what}: cannot load CA certificates ({exc.reason or exc}); they must be PEM") from None


def client_context(*, cafile: str | Path | None = None, cadata: str | None = None,
                   certfile: str | Path | None = None, keyfile: str | Path | None = None,
                   password: Optional[str] = None, check_hostname: bool = True,
                   versions: tuple[ssl.TLSVersion, ssl.TLSVersion] = (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3),
                   ciphers: Optional[str] = None, what: str = "client TLS settings") -> ssl.SSLContext:
    """A client context that verifies the server against ``cafile``/``cadata`` (else the system's
    CAs), checks its host name when ``check_hostname`` and presents ``certfile`` when given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    context.minimum_version, context.maximum_version = versions
    if ciphers:
        _set_ciphers(context, ciphers)
    if cafile or cadata:
        load_trust(context, cafile, cadata, what)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if certfile:
        load_cert_chain(context, certfile, keyfile, password, what)
    elif keyfile:
        raise InvalidConfig(f"{what}: a private key without its certificate; set the certificate file too")
    return context


def _set_ciphers(context: ssl.SSLContext, ciphers: str) -> None:
    try:
        context.set_ciphers(":".join(c.strip() for c in ciphers.split(",") if c.strip()))
    except ssl.SSLError:
        raise InvalidConfig(f"ssl.cipher.suites {ciphers!r}: no cipher suite OpenSSL knows by these names "
                            f"(use OpenSSL names, e.g. ECDHE-ECDSA-AES128-GCM-SHA256)") from None


@dataclass(frozen=True)
class TlsSettings:
    """One listener's ``ssl.*`` settings (field = property name after ``ssl.``, '_' for '.')."""
    listener: str
    keystore_location: Optional[str] = None
    keystore_certificate_chain: Optional[str] = field(default=None, repr=False)
    keystore_key: Optional[str] = field(default=None, repr=False)
    key_password: Optional[str] = field(default=None, repr=False)
    truststore_location: Optional[str] = None
    truststore_certificates: Optional[str] = field(default=None, repr=False)
    client_auth: str = "none"
    enabled_protocols: str = "TLSv1.2,TLSv1.3"
    cipher_suites: Optional[str] = None
    endpoint_identification_algorithm: Optional[str] = "https"
    handshake_timeout_ms: int = 10000

    @classmethod
    def from_values(cls, listener: str, values: Callable[[str], Any]) -> "TlsSettings":
        """The settings of ``listener``; ``values(property)`` gives a parsed ``ssl.*`` value."""
        names = {f: f"ssl.{f.replace('_', '.')}" for f in cls.__dataclass_fields__ if f != "listener"}
        return cls(listener, **{f: values(name) for f, name in names.items()})

    @property
    def what(self) -> str:
        return f"listener {self.listener}"

    def __post_init__(self) -> None:
        names = [v.strip() for v in self.enabled_protocols.split(",") if v.strip()]
        unknown = [v for v in names if v not in _VERSIONS]
        if unknown or not names:
            raise InvalidConfig(f"{self.what}: ssl.enabled.protocols={self.enabled_protocols!r}: ember serves "
                                f"{' and '.join(_VERSIONS)} only")

    @property
    def versions(self) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
        chosen = sorted(_VERSIONS[v.strip()] for v in self.enabled_protocols.split(",") if v.strip())
        return chosen[0], chosen[-1]

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_certificate_chain)

    @property
    def has_truststore(self) -> bool:
        return bool(self.truststore_location or self.truststore_certificates)

    def describe(self) -> str:
        """For the broker log: what is enforced, no secrets."""
        low, high = (version.name.replace("_", ".") for version in self.versions)
        return f"{low}{'' if low == high else '-' + high}, client auth {self.client_auth}"

    def server_context(self) -> ssl.SSLContext:
        """The context a TLS listener serves with (raises InvalidConfig saying what is missing)."""
        if not self.has_keystore:
            raise InvalidConfig(f"{self.what} uses SSL but has no certificate: set ssl.keystore.location (a PEM file "
                                f"with the private key and certificate chain) or ssl.keystore.certificate.chain "
                                f"and ssl.keystore.key (also per listener: listener.name.{self.listener.lower()}.ssl.*)")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version, context.maximum_version = self.versions
        if self.cipher_suites:
            _set_ciphers(context, self.cipher_suites)
        self._load_keystore(context)
        context.verify_mode = CLIENT_AUTH[self.client_auth]
        if self.client_auth != "none":
            if not self.has_truststore:
                raise InvalidConfig(f"{self.what}: ssl.client.auth={self.client_auth} needs the CA certificates "
                                    f"that sign client certificates: set ssl.truststore.location")
            load_trust(context, self.truststore_location, self.truststore_certificates, f"{self.what} truststore")
        return context

    def client_context(self) -> ssl.SSLContext:
        """The context this broker connects to another broker's listener with: trusts the
        truststore, presents the keystore (for listeners that require client certificates)."""
        context = client_context(cafile=self.truststore_location, cadata=self.truststore_certificates,
                                 check_hostname=self.endpoint_identification_algorithm == "https",
                                 versions=self.versions, ciphers=self.cipher_suites, what=f"{self.what} truststore")
        if self.has_keystore:
            self._load_keystore(context)
        return context

    def _load_keystore(self, context: ssl.SSLContext) -> None:
        what = f"{self.what} keystore"
        if self.keystore_location:
            load_cert_chain(context, self.keystore_location, None, self.key_password, what)
            return
        if not self.keystore_key:
            raise InvalidConfig(f"{what}: ssl.keystore.certificate.chain needs ssl.keystore.key (the private key)")
        pem = _normalized_pem(self.keystore_key, "ssl.keystore.key") \
            + _normalized_pem(self.keystore_certificate_chain or "", "ssl.keystore.certificate.chain")
        # Python loads keys from files only: a private directory, removed at once.
        with tempfile.TemporaryDirectory(prefix="ember-keystore-") as directory:
            path = Path(directory) / "keystore.pem"
            path.touch(mode=0o600)
            path.write_text(pem)
            load_cert_chain(context, path, None, self.key_password, what)
