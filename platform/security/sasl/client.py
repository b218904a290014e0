"""The client's side of a SASL mechanism: the tokens it sends, checking the server's answers.

SCRAM runs on :mod:`scramp`'s client (which also checks the server's signature, so a broker
that does not hold the user's credential cannot pass for one); PLAIN sends
``NUL username NUL password`` once.
"""
from __future__ import annotations

from typing import Any, Optional

from ember.errors import SaslAuthenticationFailed
from ember.security.sasl.scram import PLAIN


class SaslClient:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism, self.username = mechanism, username
        self._password = password
        self._scram = None if mechanism == PLAIN else _scramp().ScramClient([mechanism], username, password)
        self.complete = False

    def __repr__(self) -> str:
        return f"SaslClient({self.mechanism}, user={self.username!r})"

    def first(self) -> bytes:
        if self._scram is None:
            return b"\0" + self.username.encode() + b"\0" + self._password.encode()
        return self._scram.get_client_first().encode()

    def respond(self, token: bytes) -> Optional[bytes]:
        """The next token after the server's ``token``; None once the exchange is complete."""
        if self._scram is None:
            self.complete = True
            return None
        scramp = _scramp()
        try:
            if self._scram.stage == scramp.core.ClientStage.get_client_first:
                self._scram.set_server_first(token.decode())
                return self._scram.get_client_final().encode()
            self._scram.set_server_final(token.decode())
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            raise SaslAuthenticationFailed(f"the broker's {self.mechanism} answer is not valid ({exc}): it may not "
                                           f"hold user {self.username!r}'s credential") from None
        self.complete = True
        return None


def _scramp() -> Any:
    """:mod:`scramp`, imported on the first SCRAM login: it loads ``asn1crypto`` and
    ``importlib.metadata`` (~2 MB), which a process without SCRAM users never needs."""
    import scramp

    return scramp
