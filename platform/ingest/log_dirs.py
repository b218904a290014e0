"""A broker's log directories (``log.dirs``, Kafka's JBOD): where its partitions live.

Each directory is locked (``.lock``, ``flock``: one broker process per directory) and bound to
one broker id and cluster id (``meta.properties``) on its own. A directory the broker cannot
use at start-up (not creatable, not a directory, read-only, I/O errors, an unreadable
``meta.properties``) is set *offline* and logged, and the broker runs on the others, as Kafka
does; only when none is usable does it refuse to start. Ownership conflicts (a directory of
another broker or cluster, a directory locked by another process, a partition in two
directories) always refuse: guessing there could delete or fork data.

A partition lives in ``<dir>/<topic>-<partition>/`` with a ``partition.metadata`` file naming
its topic, partition and topic id; a deleted one's is renamed ``<topic>-<partition>.<uuid>-delete``
and removed in the background. A new partition goes to the online directory holding the
fewest partitions, ties to the first listed (Kafka's rule).
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ember.errors import EmberError, InvalidConfig, StorageError
from ember.log.data_dir import read_meta, write_meta
from ember.log.log import DELETED_DIR_SUFFIX

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
PARTITION_METADATA = "partition.metadata"


class DataDirUnusable(EmberError):
    """The broker cannot use its data directory."""
    hint = "give each broker its own --data directory (and log.dirs)"


class NoLogDirUsable(DataDirUnusable):
    """Every log directory of the broker failed: nothing left to serve from."""
    hint = "fix or replace the disks, or point log.dirs (--data) at working directories"


class DuplicatePartition(DataDirUnusable):
    """One partition in two log directories: the broker cannot tell which copy is current."""
    hint = ("delete (or move away) one of the two copies, the one on the disk that failed most recently, "
            "then start the broker again; the replica catches up from the leader")


@dataclass(frozen=True)
class LocalPartition:
    topic: str
    index: int
    topic_id: str
    path: Path


class LogDirectory:
    """One log directory: its lock, its ``meta.properties`` and whether it is usable."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: Why the directory is offline (None: online).
        self.offline_reason: str | None = None
        self._lock_fd: int | None = None

    def __repr__(self) -> str:
        return f"LogDirectory({str(self.path)!r}{', offline' if self.offline_reason else ''})"

    @property
    def online(self) -> bool:
        return self.offline_reason is None

    def fail(self, what: str, exc: BaseException) -> None:
        """Take the directory offline (once): the broker goes on with its other directories."""
        if self.offline_reason is None:
            self.offline_reason = f"{what}: {exc}"
            log.error("log directory %s is offline (%s); the broker serves its other log directories, and "
                      "the partitions in this one are reported offline until it is fixed and the broker "
                      "restarted (docs/operations.md, \"A full disk\")", self.path, self.offline_reason)

    def lock(self) -> None:
        """Take the directory's exclusive lock for the life of this process."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            self.fail("cannot lock it", exc)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirUnusable(f"{self.path} is in use by another broker process") from None
        except OSError as exc:
            os.close(fd)
            self.fail("cannot lock it", exc)
            return
        self._lock_fd = fd

    def claim(self, broker_id: int, cluster_id: str) -> None:
        """Bind the directory to this broker and cluster, or refuse a directory of another."""
        try:
            meta = read_meta(self.path)
        except (OSError, InvalidConfig) as exc:
            self.fail("cannot read its meta.properties", exc)
            return
        if meta is None:
            try:
                write_meta(self.path, broker_id, cluster_id)
            except OSError as exc:
                self.fail("cannot write its meta.properties", exc)
            return
        if meta.get("broker.id") != str(broker_id):
            raise DataDirUnusable(f"{self.path} belongs to broker {meta.get('broker.id')}, not {broker_id}")
        if meta.get("cluster.id") != cluster_id:
            raise DataDirUnusable(f"{self.path} belongs to cluster {meta.get('cluster.id')} but ZooKeeper holds "
                                  f"cluster {cluster_id}; point --zookeeper at the right ensemble")

    def partitions(self) -> list[LocalPartition]:
        """The partition directories here (a directory that cannot be listed goes offline)."""
        try:
            metas = sorted(self.path.glob(f"*/{PARTITION_METADATA}"))
        except OSError as exc:
            self.fail("cannot list it", exc)
            return []
        found = []
        for meta in metas:
            if meta.parent.name.endswith(DELETED_DIR_SUFFIX):
                continue            # a deleted partition's, renamed before its removal
            try:
                doc = json.loads(meta.read_text())
                found.append(LocalPartition(doc["topic"], int(doc["partition"]), doc["topic_id"], meta.parent))
            except (OSError, ValueError, KeyError):
                log.warning("ignoring %s: unreadable partition metadata", meta.parent)
        return found

    def deleted_directories(self) -> list[Path]:
        """Directories of deleted partitions not removed yet (the broker stopped first)."""
        try:
            return sorted(p for p in self.path.glob(f"*{DELETED_DIR_SUFFIX}") if p.is_dir())
        except OSError as exc:
            self.fail("cannot list it", exc)
            return []

    def partition_count(self) -> int:
        """Partition directories here (``<topic>-<n>``), counted without reading them."""
        try:
            with os.scandir(self.path) as entries:
                return sum(1 for e in entries if e.name.rpartition("-")[2].isdigit() and e.is_dir())
        except FileNotFoundError:   # not created yet: opening the first log creates it
            return 0

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


class LogDirs:
    """The broker's log directories, in ``log.dirs`` order."""

    def __init__(self, paths: Sequence[Path]) -> None:
        if not paths:
            raise InvalidConfig("a broker needs at least one log directory")
        self.dirs = tuple(LogDirectory(path) for path in paths)
        #: The directory each partition was opened in (kept after a deletion: harmless), so it is
        #: reopened there even when that directory cannot be read for a while.
        self._homes: dict[tuple[str, int], LogDirectory] = {}

    def online(self) -> list[LogDirectory]:
        return [d for d in self.dirs if d.online]

    def offline(self) -> list[LogDirectory]:
        return [d for d in self.dirs if not d.online]

    def lock(self) -> None:
        """Lock every directory; one that cannot be locked goes offline."""
        for directory in self.dirs:
            directory.lock()
        self._check_any_online()

    def claim(self, broker_id: int, cluster_id: str) -> None:
        """Bind every online directory to this broker and cluster (see :meth:`LogDirectory.claim`)."""
        for directory in self.online():
            directory.claim(broker_id, cluster_id)
        self._check_any_online()

    def local_partitions(self) -> list[LocalPartition]:
        """Every partition found in the online directories; one found in two refuses. (Two copies
        of different topic ids are a deleted topic's and its successor's: the broker deletes the
        stale one, whose id the metadata no longer has.)"""
        found: dict[tuple[str, int, str], LocalPartition] = {}
        for directory in self.online():
            for local in directory.partitions():
                other = found.setdefault((local.topic, local.index, local.topic_id), local)
                if other is not local:
                    raise DuplicatePartition(f"partition {local.topic}-{local.index} is in two log directories: "
                                             f"{other.path} and {local.path}")
        self._check_any_online()
        return list(found.values())

    def deleted_directories(self) -> list[Path]:
        """The deleted partitions' directories left in the online directories (see ``Log.rename_for_delete``)."""
        return [path for directory in self.online() for path in directory.deleted_directories()]

    def partition_dir(self, topic: str, index: int) -> Path:
        """Where the partition lives: the directory it was opened in or is found in, else (a new
        partition) the online directory with the fewest partitions, ties to the first listed."""
        key, name = (topic, index), f"{topic}-{index}"
        home = self._homes.get(key)
        if home is None:
            home = self._look_for(name) or self._place(name)
            self._homes[key] = home
        return home.path / name

    def _look_for(self, name: str) -> LogDirectory | None:
        for directory in self.online():
            try:
                if (directory.path / name).is_dir():
                    return directory
            except OSError as exc:   # it may be there: never create a second copy elsewhere
                raise StorageError(f"cannot look for {name} in {directory.path}: {exc}") from exc
        return None

    def _place(self, name: str) -> LogDirectory:
        online = self.online()
        if len(online) == 1:
            return online[0]    # nothing to balance: no need to count (a scan per new partition)
        counts: list[tuple[int, int, LogDirectory]] = []
        for order, directory in enumerate(online):
            try:
                counts.append((directory.partition_count(), order, directory))
            except OSError as exc:
                log.warning("not placing %s in %s: cannot count its partitions (%s)", name, directory.path, exc)
        if not counts:
            raise StorageError(f"no online log directory can take {name} "
                               f"(log dirs: {', '.join(str(d.path) for d in self.dirs)})")
        return min(counts, key=lambda c: c[:2])[2]

    def unlock(self) -> None:
        for directory in self.dirs:
            directory.unlock()

    def _check_any_online(self) -> None:
        if not self.online():
            raise NoLogDirUsable("no log directory is usable: " + "; ".join(
                f"{d.path} ({d.offline_reason})" for d in self.dirs))
