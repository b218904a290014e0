"""ACLs in ZooKeeper, in Kafka's layout (below ember's ``/ember`` chroot), cached on every broker.

* ``/kafka-acl/<ResourceType>/<name>``: the LITERAL ACLs of one resource name (``*``: all);
* ``/kafka-acl-extended/prefixed/<ResourceType>/<prefix>``: the PREFIXED ones;
* each znode holds ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}``.

Writers (CreateAcls / DeleteAcls on any broker) change one znode by compare-and-set on its
version and retry on a conflict, so concurrent changes are not lost. Every broker keeps the whole
set in memory, kept current by ZooKeeper watches (the children of each resource-type znode and the
data of each ACL znode), and hands each new snapshot to its authorizer: a change takes effect on
every broker as soon as the watches fire. If ZooKeeper is unreachable the last snapshot stays in
force; every ZooKeeper wait here is bounded.
"""
from __future__ import annotations

import functools
import json
import logging
import threading
import time
from typing import Any, Callable, Iterable
from urllib.parse import quote, unquote

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ember.errors import EmberError, RequestTimedOut
from ember.security.authorizer.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from ember.zk.zk_session import ZkSession

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
RESOURCE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID)
PATTERN_ROOTS = {PatternType.LITERAL: LITERAL_ROOT, PatternType.PREFIXED: PREFIXED_ROOT}
#: Bound of one ZooKeeper call made by a writer.
ZK_TIMEOUT_S = 10.0
#: Bound of one DeleteAcls, over all the resources it changes (each ZooKeeper call is bounded too).
REMOVE_BOUND_S = 30.0
_CAS_ATTEMPTS = 20

Snapshot = Callable[[list[AclBinding]], None]


def acl_path(pattern: ResourcePattern) -> str:
    """The znode of a resource pattern (names are percent-encoded only where ZooKeeper needs it: ``/``, ``%``)."""
    return f"{PATTERN_ROOTS[pattern.pattern_type]}/{pattern.type.kafka_name}/{quote(pattern.name, safe='*@:=,+ ')}"


def encode(entries: Iterable[AccessControlEntry]) -> bytes:
    return json.dumps({"version": 1, "acls": [e.to_json() for e in sorted(entries)]}).encode()


def decode(data: bytes | None) -> frozenset[AccessControlEntry]:
    """Every entry of a znode; raises on anything unreadable (a writer must not drop entries)."""
    if not data:
        return frozenset()
    return frozenset(AccessControlEntry.from_json(e) for e in json.loads(data)["acls"])


def decode_readable(data: bytes, where: str) -> frozenset[AccessControlEntry]:
    """The entries of a znode a broker can enforce: an entry it cannot read (an operation newer
    than ember, a damaged field) is logged and skipped, the others still apply; a document that
    is not Kafka's JSON at all raises."""
    entries = []
    for raw in json.loads(data)["acls"]:
        try:
            entries.append(AccessControlEntry.from_json(raw))
        except (ValueError, KeyError, TypeError, EmberError) as exc:
            log.error("ignoring an unreadable entry of ACL znode %s (%s): %r", where, exc, raw)
    return frozenset(entries)


class AclStore:
    def __init__(self, session: ZkSession, on_snapshot: Snapshot) -> None:
        self.session = session
        self.on_snapshot = on_snapshot
        self._lock = threading.Condition()
        self._nodes: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._watched: set[ResourcePattern] = set()

    # -- cache (kazoo's watch thread) ----------------------------------------------------------

    def start(self) -> None:
        """Install the watches; returns once the initial ACLs are read."""
        client = self.session.client
        for pattern_type, root in PATTERN_ROOTS.items():
            for resource_type in RESOURCE_TYPES:
                path = f"{root}/{resource_type.kafka_name}"
                client.ensure_path(path)
                ChildrenWatch(client, path, self._children_watcher(resource_type, pattern_type))

    def _children_watcher(self, resource_type: ResourceType,
                          pattern_type: PatternType) -> Callable[[list[str]], None]:
        def on_children(children: list[str]) -> None:
            present = {ResourcePattern(resource_type, unquote(child), pattern_type) for child in children}
            with self._lock:
                gone = [p for p in self._nodes if p.type == resource_type and p.pattern_type == pattern_type
                        and p not in present]
                for pattern in gone:
                    self._nodes.pop(pattern, None)
                new = [p for p in present if p not in self._watched]
                self._watched.update(new)
            for pattern in new:
                DataWatch(self.session.client, acl_path(pattern), self._data_watcher(pattern))
            if gone:
                self._publish()
        return on_children

    def _data_watcher(self, pattern: ResourcePattern) -> Callable[[bytes | None, object], bool]:
        def on_data(data: bytes | None, _stat: object) -> bool:
            with self._lock:
                if data is None:
                    self._nodes.pop(pattern, None)
                    self._watched.discard(pattern)
                else:
                    try:
                        self._nodes[pattern] = decode_readable(data, acl_path(pattern))
                    except (ValueError, KeyError, TypeError) as exc:   # keep enforcing what was read before
                        log.error("ACL znode %s is not Kafka's ACL JSON (%s); its previous entries stay in force "
                                  "until it is fixed", acl_path(pattern), exc)
            self._publish()
            return data is not None     # a deleted znode: stop; the children watch re-adds it
        return on_data

    def _publish(self) -> None:
        with self._lock:
            snapshot = [AclBinding(p, e) for p, entries in self._nodes.items() for e in entries]
            self.on_snapshot(snapshot)
            self._lock.notify_all()

    def bindings(self, acl_filter: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        """The cached ACLs ``acl_filter`` matches (DescribeAcls answers from here, as Kafka does)."""
        with self._lock:
            found = [AclBinding(p, e) for p, entries in self._nodes.items() for e in entries]
        return sorted(b for b in found if acl_filter.matches(b))

    def wait_cached(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait (bounded) until this broker's cache shows a change it wrote."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
        return True

    # -- writes (any thread but kazoo's) -------------------------------------------------------

    def add(self, bindings: Iterable[AclBinding]) -> None:
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            binding.validate()
            by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
        for pattern, entries in by_pattern.items():
            self._update(pattern, functools.partial(frozenset.union, frozenset(entries)))
        self.wait_cached(lambda: all(e in self._nodes.get(p, ()) for p, es in by_pattern.items() for e in es),
                         ZK_TIMEOUT_S)

    def remove(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Delete every ACL ``acl_filter`` matches; returns what was deleted. As Kafka does, the
        cache picks the resources that hold a match, and only those are read again from ZooKeeper
        and written under compare-and-set; the whole removal is bounded by :data:`REMOVE_BOUND_S`."""
        with self._lock:
            patterns = [pattern for pattern, entries in self._nodes.items()
                        if any(acl_filter.matches(AclBinding(pattern, e)) for e in entries)]
        deadline = time.monotonic() + REMOVE_BOUND_S
        removed: list[AclBinding] = []
        for done, pattern in enumerate(patterns):
            if time.monotonic() > deadline:
                raise RequestTimedOut(f"removing ACLs took over {REMOVE_BOUND_S:.0f}s: {len(removed)} removed from "
                                      f"{done} of {len(patterns)} resources; retry to remove the rest")
            dropped: list[AclBinding] = []

            def drop(current: frozenset[AccessControlEntry], pattern: ResourcePattern = pattern,
                     dropped: list[AclBinding] = dropped) -> frozenset[AccessControlEntry]:
                gone = {e for e in current if acl_filter.matches(AclBinding(pattern, e))}
                dropped[:] = [AclBinding(pattern, e) for e in gone]
                return current - gone
            self._update(pattern, drop)
            removed += dropped
        self.wait_cached(lambda: not any(b.entry in self._nodes.get(b.pattern, ()) for b in removed), ZK_TIMEOUT_S)
        return sorted(removed)

    def _update(self, pattern: ResourcePattern,
                change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]) -> None:
        """Compare-and-set one znode: read, change, write at the version read; again on a conflict."""
        client, path = self.session.client, acl_path(pattern)
        for _ in range(_CAS_ATTEMPTS):
            try:
                data, stat = _bounded(client.get_async(path))
            except NoNodeError:
                data, stat = None, None
            current = decode(data)
            new = frozenset(change(current))
            if new == current and stat is not None:
                return
            try:
                if stat is None:
                    if new:
                        _bounded(client.create_async(path, encode(new), makepath=True))
                elif not new:
                    _bounded(client.delete_async(path, version=stat.version))
                else:
                    _bounded(client.set_async(path, encode(new), version=stat.version))
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue        # another broker changed it meanwhile: read again
        raise RequestTimedOut(f"the ACLs of {pattern} changed concurrently {_CAS_ATTEMPTS} times in a row; retry")


def _bounded(result: Any) -> Any:
    """A kazoo call's result within :data:`ZK_TIMEOUT_S`."""
    try:
        return result.get(timeout=ZK_TIMEOUT_S)
    except KazooTimeoutError:
        raise RequestTimedOut(f"ZooKeeper did not answer within {ZK_TIMEOUT_S:.0f}s; the ACLs are unchanged "
                              f"unless a retry shows otherwise") from None
