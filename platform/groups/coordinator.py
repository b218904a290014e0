"""The broker-side group coordinator: the one object the protocol handlers call for the groups this
broker coordinates. It routes: it decides which groups are this broker's, holds them in memory
(loaded from ZooKeeper on first use), runs their timers, and hands each request to the part that
does the work: the members' requests to :mod:`ember.groups.members` (which drive
:mod:`ember.groups.rebalance`), offsets to :mod:`ember.groups.offsets`, administration to
:mod:`ember.groups.group_admin`; the state is :mod:`ember.groups.group`.

The coordinator of a group is ``sorted(live broker ids)[crc32(group) % n]`` (see
:func:`coordinator_id`), so groups spread over brokers and every broker answers FindCoordinator
alike. Membership lives in memory on the event loop (no locks: every change happens between
awaits); committed offsets and the group's generation are in ZooKeeper (:class:`GroupStore`), so a
new coordinator carries on after a broker dies (members rejoin it, offsets are intact).
"""
from __future__ import annotations

import asyncio
import logging
import re
import zlib
from typing import Iterable, Literal, Optional, overload

from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.records import BrokerInfo
from ember.errors import CoordinatorNotAvailable, InvalidGroupId, NotCoordinator
from ember.groups.group import EMPTY, Group, JoinResult
from ember.groups.group_admin import GroupAdministration
from ember.groups.members import MemberRequests
from ember.groups.offsets import OffsetManager
from ember.groups.rebalance import Rebalancer
from ember.groups.store import CommittedOffset, GroupStore
from ember.security.authorizer.access import ALLOW_ALL, Access
from ember.security.authorizer.model import Operation
from ember.wire.types import TopicPartition

log = logging.getLogger(__name__)

MAX_GROUP_ID_LENGTH = 249
TICK_S = 0.1
EMPTY_GROUP_IDLE_S = 60.0        # an Empty group unused this long leaves memory (it reloads from ZooKeeper)


def coordinator_id(group_id: str, live_broker_ids: Iterable[int]) -> Optional[int]:
    """The broker that coordinates ``group_id`` given the live brokers (None if there are none)."""
    ids = sorted(live_broker_ids)
    return ids[zlib.crc32(group_id.encode()) % len(ids)] if ids else None


#: Characters ZooKeeper refuses in a path (control characters, surrogates, private use, specials).
_ZK_ILLEGAL = re.compile("[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")


def validate_group_id(group_id: str) -> None:
    """Group ids become ZooKeeper path segments: no '/' nor any character ZooKeeper refuses,
    not '.' or '..', not empty."""
    if (not group_id or group_id in (".", "..") or "/" in group_id or len(group_id) > MAX_GROUP_ID_LENGTH
            or _ZK_ILLEGAL.search(group_id)):
        shown = repr(group_id) if len(group_id) <= MAX_GROUP_ID_LENGTH else f"of {len(group_id)} characters"
        raise InvalidGroupId(f"group id {shown} is not allowed (non-empty, no '/' or control characters, "
                             f"at most {MAX_GROUP_ID_LENGTH} characters)")


class GroupCoordinator:
    def __init__(self, broker_id: int, cache: MetadataCache, store: GroupStore,
                 initial_rebalance_delay_ms: int, max_session_timeout_ms: int = 1800000,
                 access: Access = ALLOW_ALL) -> None:
        self.broker_id = broker_id
        #: Kafka's group ACLs: Read to be a member or commit, Describe to look, Delete to delete.
        self.access = access
        self.cache = cache
        self.store = store
        self.groups: dict[str, Group] = {}
        self._rebalancer = Rebalancer(cache, store, self.groups, initial_rebalance_delay_ms)
        self._members = MemberRequests(access, self._load, self._rebalancer, max_session_timeout_ms)
        self._offsets = OffsetManager(access, cache, store, self._load)
        self._admin = GroupAdministration(access, store, self.groups, self.owns, self._load)
        self._ticker: Optional[asyncio.Task[None]] = None

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        await self._rebalancer.close()
        self.groups.clear()

    # -- ownership ---------------------------------------------------------------------------

    def coordinator_broker(self, group_id: str) -> BrokerInfo:
        """The live broker that coordinates ``group_id`` (what FindCoordinator answers)."""
        validate_group_id(group_id)
        self.access.check_group(Operation.DESCRIBE, group_id)
        brokers = self.cache.brokers()
        node = coordinator_id(group_id, brokers)
        if node is None:
            raise CoordinatorNotAvailable("no live broker can coordinate groups")
        return brokers[node]

    def owns(self, group_id: str) -> bool:
        return coordinator_id(group_id, self.cache.brokers()) == self.broker_id

    @overload
    async def _load(self, group_id: str, create: Literal[True]) -> Group: ...

    @overload
    async def _load(self, group_id: str, create: bool) -> Optional[Group]: ...

    async def _load(self, group_id: str, create: bool) -> Optional[Group]:
        """This broker's state of ``group_id``, loaded from ZooKeeper on first use."""
        validate_group_id(group_id)
        if not self.owns(group_id):
            raise NotCoordinator(f"broker {self.broker_id} is not the coordinator of group {group_id!r}")
        loop = asyncio.get_running_loop()
        group = self.groups.get(group_id)
        if group is not None:
            group.last_used = loop.time()
            return group
        doc, version = await asyncio.to_thread(self.store.load_metadata_versioned, group_id)
        if doc is None and not create:
            return None
        group = self.groups.get(group_id)   # another request may have loaded it meanwhile
        if group is None:
            group = Group.loaded(group_id, doc or {}, version)
            self.groups[group_id] = group
        group.last_used = loop.time()
        return group

    async def _tick_forever(self) -> None:
        """Expire silent members, end rebalances whose time is up, hand off groups we lost,
        forget idle Empty groups."""
        while True:
            await asyncio.sleep(TICK_S)
            self.tick()

    def tick(self) -> None:
        now = asyncio.get_running_loop().time()
        for group_id, group in list(self.groups.items()):
            try:
                if not self.owns(group_id):
                    self._rebalancer.lose(group, NotCoordinator(f"group {group_id!r} moved to another broker"))
                    continue
                self._rebalancer.expire(group, now)
                if (group.state == EMPTY and not group.members and not group.expected and not group.pending_ids
                        and group.completing is None and now - group.last_used > EMPTY_GROUP_IDLE_S):
                    del self.groups[group_id]
            except Exception:
                log.exception("group %s: coordinator tick failed", group_id)

    # -- requests, each handed to the part that serves it -------------------------------------

    async def join(self, group_id: str, member_id: str, client_id: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, topics: list[str], protocols: list[str],
                   metadata: Optional[dict[str, bytes]] = None, protocol_type: str = "consumer",
                   instance_id: Optional[str] = None, client_host: str = "") -> JoinResult:
        return await self._members.join(group_id, member_id, client_id, session_timeout_ms, rebalance_timeout_ms,
                                        topics, protocols, metadata, protocol_type, instance_id, client_host)

    async def heartbeat(self, group_id: str, member_id: str, generation: int,
                        instance_id: Optional[str] = None) -> None:
        await self._members.heartbeat(group_id, member_id, generation, instance_id)

    async def sync(self, group_id: str, member_id: str, generation: int,
                   assignments: dict[str, tuple[bytes, list[TopicPartition]]],
                   instance_id: Optional[str] = None) -> bytes:
        return await self._members.sync(group_id, member_id, generation, assignments, instance_id)

    async def leave(self, group_id: str, member_id: str, instance_id: Optional[str] = None) -> None:
        await self._members.leave(group_id, member_id, instance_id)

    async def commit(self, group_id: str, member_id: str, generation: int,
                     offsets: dict[TopicPartition, tuple[int, str]], instance_id: Optional[str] = None) -> None:
        await self._offsets.commit(group_id, member_id, generation, offsets, instance_id)

    async def check_commit(self, group_id: str, member_id: str, generation: int, partitions: list[TopicPartition],
                           instance_id: Optional[str] = None, transactional: bool = False) -> None:
        await self._offsets.check_commit(group_id, member_id, generation, partitions, instance_id, transactional)

    async def fetch(self, group_id: str, partitions: Optional[list[TopicPartition]]) -> dict[TopicPartition, CommittedOffset]:
        return await self._offsets.fetch(group_id, partitions)

    async def unstable(self, group_id: str) -> set[TopicPartition]:
        return await self._offsets.unstable(group_id)

    async def describe(self, group_id: str) -> Group:
        return await self._admin.describe(group_id)

    async def list_groups(self) -> list[dict[str, str]]:
        return await self._admin.list_groups()

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, Exception]:
        return await self._admin.delete_offsets(group_id, partitions)

    async def delete(self, group_id: str) -> None:
        await self._admin.delete(group_id)
