"""ember's own listener: the network server answering ember's framed protocol, with ember's SASL
exchange before authentication (``api_sasl``)."""
from __future__ import annotations

from ember.net.server import Authenticate, BrokerServer
from ember.protocol.ember.api_sasl import authenticate


class EmberServer(BrokerServer):
    authenticate: Authenticate = staticmethod(authenticate)
