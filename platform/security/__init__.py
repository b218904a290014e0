"""Security of listeners and clients: security protocols, TLS contexts from PEM settings, the
connection's principal, and the certificates of ``ember cluster up --secure`` (docs/security.md)."""
