"""ember.net — the network layer both protocols and every client sit on: the broker's server loop
(framing, TLS, SASL, idle and size limits) and the client's connection (channel, SASL login,
correlation, deadlines)."""
