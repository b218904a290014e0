"""ember's own wire protocol (docs/protocol.md): framing, the server, and one handler module per
API family."""
