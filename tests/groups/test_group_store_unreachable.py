"""GroupStore alone (a stand-in kazoo client): ZooKeeper being unreachable is a retriable
coordinator error, not an unexpected one a committing consumer would give up on; a group delete
raced by commits, and a commit raced by a group delete, are retried a bounded number of times,
then refused with a typed error."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from kazoo.exceptions import ConnectionLoss, NoAuthError, NoNodeError, NotEmptyError, SessionExpiredError

from ember.errors import CoordinatorNotAvailable, NonEmptyGroup
from ember.groups.store import DELETE_ATTEMPTS, GroupStore
from ember.wire.types import TopicPartition


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


def test_a_delete_raced_by_commits_is_retried_then_refused_with_a_typed_error() -> None:
    class _Racing:
        """Each recursive delete finds a new offset written under the group, ``races`` times."""

        def __init__(self, races: int) -> None:
            self.races, self.calls = races, 0

        def exists(self, path: str) -> object:
            return object()              # the group is there

        def delete(self, path: str, recursive: bool = False) -> None:
            self.calls += 1
            if self.calls <= self.races:
                raise NotEmptyError()

    racing = _Racing(races=2)
    assert GroupStore(SimpleNamespace(client=racing)).delete("g") is True   # type: ignore[arg-type]
    assert racing.calls == 3
    endless = _Racing(races=10**6)
    with pytest.raises(NonEmptyGroup, match="being committed while it is deleted"):
        GroupStore(SimpleNamespace(client=endless)).delete("g")   # type: ignore[arg-type]
    assert endless.calls == DELETE_ATTEMPTS


def test_deleting_a_group_that_is_not_in_zookeeper_answers_false() -> None:
    class _Kazoo:
        """Like kazoo: a recursive delete of a missing node returns quietly."""

        def __init__(self) -> None:
            self.deleted: list[str] = []

        def exists(self, path: str) -> object | None:
            return None

        def delete(self, path: str, recursive: bool = False) -> None:
            if not recursive:
                raise NoNodeError()
            self.deleted.append(path)

    client = _Kazoo()
    assert GroupStore(SimpleNamespace(client=client)).delete("never-existed") is False   # type: ignore[arg-type]
    assert client.deleted == []


def test_a_commit_raced_by_a_group_delete_is_retried_then_refused_with_a_retriable_error() -> None:
    from kazoo.exceptions import NodeExistsError, NoNodeError

    class _Result:
        def get(self) -> None:
            raise NoNodeError()          # the offset znode does not exist yet

    class _Deleting:
        """The first ``races`` writes find the path (or its parents) deleted under them."""

        def __init__(self, races: int) -> None:
            self.races, self.writes, self.created = races, 0, []

        def set_async(self, path: str, data: bytes) -> _Result:
            return _Result()

        def create(self, path: str, data: bytes, makepath: bool = False) -> None:
            self.writes += 1
            if self.writes <= self.races:
                raise NoNodeError() if self.writes % 2 else NodeExistsError()
            self.created.append(path)

        def set(self, path: str, data: bytes) -> None:
            raise NoNodeError()          # deleted between the create that found it and the set

    racing = _Deleting(races=3)
    GroupStore(SimpleNamespace(client=racing)).commit("g", {TopicPartition("t", 0): (5, "")})  # type: ignore[arg-type]
    assert racing.created and racing.writes == 4
    endless = _Deleting(races=10**6)
    with pytest.raises(CoordinatorNotAvailable, match="deleted") as raised:
        GroupStore(SimpleNamespace(client=endless)).commit("g", {TopicPartition("t", 0): (5, "")})  # type: ignore[arg-type]
    assert raised.value.retriable and endless.writes == DELETE_ATTEMPTS


def test_fetching_offsets_reads_only_those_committed() -> None:
    """A new group's consumer asks for every partition it was assigned (1,000 here): reading a
    missing node per partition held its first fetch back for a third of a second."""
    from ember.groups.store import CommittedOffset

    stored = {("t", 3): CommittedOffset(30, "", 1), ("t", 7): CommittedOffset(70, "m", 2)}

    class _Done:
        def __init__(self, value: object = None, error: Exception | None = None) -> None:
            self.value, self.error = value, error

        def get(self) -> object:
            if self.error is not None:
                raise self.error
            return self.value

    class _Offsets:
        """The offsets' znodes, counting the reads of single offsets."""

        reads = 0

        def get_children_async(self, path: str) -> _Done:
            topic = path.rsplit("/", 1)[1]
            found = [str(p) for t, p in stored if t == topic]
            return _Done(found) if found else _Done(error=NoNodeError())

        def get_async(self, path: str) -> _Done:
            self.reads += 1
            *_, topic, index = path.split("/")
            return _Done((stored[(topic, int(index))].to_bytes(), None))

    client = _Offsets()
    store = GroupStore(SimpleNamespace(client=client))     # type: ignore[arg-type]
    wanted = [TopicPartition(topic, p) for topic in ("t", "u") for p in range(1000)]
    assert store.fetch("g", wanted) == {TopicPartition(*tp): offset for tp, offset in stored.items()}
    assert client.reads == 2
