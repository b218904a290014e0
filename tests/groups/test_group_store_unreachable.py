"""GroupStore alone (a stand-in kazoo client): ZooKeeper being unreachable is a retriable
coordinator error, not an unexpected one a committing consumer would give up on."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from kazoo.exceptions import ConnectionLoss, NoAuthError, SessionExpiredError

from ember.client.types import TopicPartition
from ember.errors import CoordinatorNotAvailable
from ember.groups.store import GroupStore


class _Failing:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str):
        def fail(*args, **kwargs):
            raise self.error
        return fail


@pytest.mark.parametrize("error", [ConnectionLoss(), SessionExpiredError()])
def test_an_unreachable_zookeeper_is_a_retriable_coordinator_error(error) -> None:
    store = GroupStore(SimpleNamespace(client=_Failing(error)))     # type: ignore[arg-type]
    for call in (lambda: store.load_metadata_versioned("g"), lambda: store.groups(),
                 lambda: store.fetch("g", [TopicPartition("t", 0)]), lambda: store.delete("g")):
        with pytest.raises(CoordinatorNotAvailable, match="cannot reach ZooKeeper") as raised:
            call()
        assert raised.value.retriable


def test_other_zookeeper_failures_are_not_disguised() -> None:
    store = GroupStore(SimpleNamespace(client=_Failing(NoAuthError())))   # type: ignore[arg-type]
    with pytest.raises(NoAuthError):
        store.groups()
