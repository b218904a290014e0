"""Rate-limited log lines for what clients can repeat at will: an ACL refusal
(:mod:`ember.security.authorizer.access`), a failed SASL authentication (``ember.net.server``; a
client with a wrong password may reconnect every ~150 ms). One line per key per interval; the next
line let through says how many were held back since the last one (:func:`suppressed_note`).
"""
from __future__ import annotations

import time
from typing import Hashable, Optional

#: Keys remembered before the limiter forgets them all (bounds memory under made-up user names).
MAX_REMEMBERED = 10000


class LogLimiter:
    """Lets one log line per key through per ``interval_s``, counting the ones it holds back."""

    def __init__(self, interval_s: float, max_remembered: int = MAX_REMEMBERED) -> None:
        self.interval_s = interval_s
        self._max_remembered = max_remembered
        #: key -> (monotonic time of its last line, lines held back since)
        self._keys: dict[Hashable, tuple[float, int]] = {}

    def admit(self, key: Hashable) -> Optional[int]:
        """None: do not log (counted); else log, and this many lines of ``key`` were held back since
        its last one."""
        now = time.monotonic()
        last = self._keys.get(key)
        if last is not None and now - last[0] < self.interval_s:
            self._keys[key] = (last[0], last[1] + 1)
            return None
        if last is None and len(self._keys) >= self._max_remembered:
            self._keys.clear()
        self._keys[key] = (now, 0)
        return last[1] if last is not None else 0


def suppressed_note(count: int) -> str:
    """What a line let through appends: nothing, or how many alike were not logged before it."""
    return f" ({count} more like this not logged since the last one)" if count else ""
