"""The fetcher's side of a fetch session (KIP-227; Kafka's ``FetchSessionHandler``), shared by
follower replica fetchers and ember's consumer: what the broker's session holds of each partition,
which partitions the next fetch names, and what an answer or a failure does to the session. The
broker's side is ``ember.ingest.fetch_session``.

Each fetch states the partitions wanted now with their position (fetch offset, plus whatever else
must reach the broker when it changes: a leader epoch). The first fetch (epoch 0) names them all
and opens a session; later ones name only those whose position differs from what the session
holds, and ``forgotten`` those no longer wanted. A session error or a lost answer starts over with
a full fetch, which names the old session so the broker closes it.
"""
from __future__ import annotations

from typing import Any, Generic, Hashable, Iterable, TypeVar

#: Epochs of a fetch request (Kafka's FetchMetadata): 0 opens a session, -1 fetches without one.
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
INT32_MAX = 2**31 - 1

K = TypeVar("K", bound=Hashable)


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: 1, 2, ..., INT32_MAX, 1, ... (0 and -1 mean open and close)."""
    return 1 if epoch >= INT32_MAX else epoch + 1


class FetchSessionHandler(Generic[K]):
    """One fetcher's session with one broker (not thread-safe: one fetch in flight at a time)."""

    def __init__(self) -> None:
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self._held: dict[K, Hashable] = {}
        self._resets = self._resets_at_send = 0

    def next_fetch(self, wanted: dict[K, Hashable]) -> tuple[list[K], list[K]]:
        """The partitions the next fetch names and those it forgets, for ``wanted`` (partition:
        position). A full fetch names all of them."""
        self._resets_at_send = self._resets
        if self.epoch == INITIAL_EPOCH:
            return list(wanted), []
        listed = [key for key, at in wanted.items() if self._held.get(key) != at]
        return listed, [key for key in self._held if key not in wanted]

    def next_changes(self, moved: dict[K, Hashable], dropped: Iterable[K]) -> tuple[list[K], list[K]]:
        """``next_fetch`` for a fetcher that tracks what changed (not a full fetch): ``moved``
        holds the position now of every partition that may have moved, ``dropped`` those no
        longer wanted; the others are as the session holds them."""
        assert self.epoch != INITIAL_EPOCH, "the session's first fetch names every partition (next_fetch)"
        self._resets_at_send = self._resets
        listed = [key for key, at in moved.items() if self._held.get(key) != at]
        return listed, [key for key in dropped if key in self._held]

    def holds_any(self) -> bool:
        """Whether the broker's session holds any partition (as far as the answers so far say)."""
        return bool(self._held)

    def fields(self) -> dict[str, Any]:
        """The session fields of the next fetch request."""
        return {"session_id": self.session_id, "session_epoch": self.epoch}

    def answered(self, session_id: int, wanted: dict[K, Hashable], listed: list[K], forgotten: list[K]) -> None:
        """The broker answered the fetch built by ``next_fetch(wanted)`` with ``session_id``
        (0: it keeps no session for this fetcher, whose fetches stay full). After a ``reset``
        while the fetch was in flight the next fetch is a full one all the same."""
        if self._resets != self._resets_at_send:
            self.session_id = session_id or self.session_id    # the full fetch closes it
            return
        if session_id == NO_SESSION:
            self.reset()
            self.session_id = NO_SESSION
            return
        if self.epoch == INITIAL_EPOCH:
            self._held.clear()
        self.session_id, self.epoch = session_id, next_epoch(self.epoch)
        for key in listed:
            self._held[key] = wanted[key]
        for key in forgotten:
            self._held.pop(key, None)

    def reset(self) -> None:
        """Start over with a full fetch: after a session error, a failed request, or an answer
        the fetcher could not apply. It names the old session, so the broker closes it."""
        self.epoch = INITIAL_EPOCH
        self._held.clear()
        self._resets += 1

    def holds(self, key: K) -> bool:
        """Whether the broker's session holds ``key`` (as far as the answers so far say)."""
        return key in self._held
