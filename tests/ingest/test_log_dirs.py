"""Several log directories per broker (``log.dirs``, Kafka's JBOD): new partitions go to the
directory with the fewest, ties by order; a partition in two directories, a directory of another
broker or cluster, or one locked by another process refuses; a directory that cannot be used at
start-up goes offline and the broker runs on the others, reporting the replicas it cannot find
as offline (never creating them empty elsewhere); with none usable the broker refuses to start."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from ingest_fakes import FakeInterBroker, FakeIsrWriter, FakeMetadataCache, FakeOfflineReplicaWriter, run, until

from ember.cluster.records import PartitionState
from ember.errors import InvalidConfig, StorageError
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.log_dirs import DataDirUnusable, DuplicatePartition, LogDirs, NoLogDirUsable
from ember.ingest.log_manager import LogManager
from ember.ingest.replica_manager import ReplicaManager
from ember.log.data_dir import read_meta, write_meta
from ember.server.health import check_readiness

ME = 1
CLUSTER = "cluster-a"


def started(*paths: Path) -> LogDirs:
    """Locked and claimed, as the broker starts them (unlocked again when that refuses)."""
    dirs = LogDirs(list(paths))
    try:
        dirs.lock()
        dirs.claim(ME, CLUSTER)
    except Exception:
        dirs.unlock()
        raise
    return dirs


def make_partition(directory: Path, topic: str, index: int) -> None:
    """A partition directory as the broker leaves it (``partition.metadata`` naming it)."""
    LogManager(directory, ME).open_log(topic, index, f"id-{topic}", BrokerConfig.from_properties().log_config()).close()


# -- placement ---------------------------------------------------------------------------------

def test_a_new_partition_goes_to_the_directory_with_the_fewest_ties_by_order(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for index in range(2):
        make_partition(a, "old", index)
    dirs = started(a, b, c)
    assert {p.path for p in dirs.local_partitions()} == {a / "old-0", a / "old-1"}
    placed = []
    for index in range(5):
        path = dirs.partition_dir("t", index)
        path.mkdir()
        placed.append(path.parent.name)
    # b and c tie at 0 (b first), then at 1, then all three at 2 (a first)
    assert placed == ["b", "c", "b", "c", "a"]
    # a partition keeps the directory it is in
    assert dirs.partition_dir("old", 1) == a / "old-1"
    assert dirs.partition_dir("t", 0) == b / "t-0"


def test_one_directory_is_the_single_directory_of_today(tmp_path: Path) -> None:
    dirs = started(tmp_path)
    assert dirs.partition_dir("t", 0) == tmp_path / "t-0"
    assert read_meta(tmp_path) == {"broker.id": str(ME), "cluster.id": CLUSTER}
    assert (tmp_path / ".lock").exists()


# -- refusals ----------------------------------------------------------------------------------

def test_a_partition_in_two_directories_refuses_naming_both(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_partition(a, "t", 3)
    make_partition(b, "t", 3)
    dirs = started(a, b)
    with pytest.raises(DuplicatePartition) as refused:
        dirs.local_partitions()
    text = str(refused.value)
    assert str(a / "t-3") in text and str(b / "t-3") in text and "delete" in text


def test_a_deleted_topics_copy_next_to_its_successors_is_deleted_not_a_duplicate(tmp_path: Path) -> None:
    """t was deleted and re-created while the disk holding t-0 was away: back, its stale copy
    (old topic id) is deleted at start-up and the current one opened where it is."""
    a, b = tmp_path / "a", tmp_path / "b"
    config = BrokerConfig.from_properties().log_config()
    LogManager(a, ME).open_log("t", 0, "id-old", config).close()
    LogManager(b, ME).open_log("t", 0, "id-t", config).close()
    cache = FakeMetadataCache()
    cache.put_topic("t", {0: [ME]}, states={0: PartitionState(ME, 0, [ME], 1, 0)})

    async def scenario() -> None:
        logs = LogManager([a, b], ME)
        replicas = ReplicaManager(ME, cache, logs, BrokerConfig.from_properties(), FakeIsrWriter(cache, ME),
                                  inter_broker=FakeInterBroker())
        try:
            await replicas.start()
            assert replicas.leader_partition("t", 0).log.directory == b / "t-0"
            assert not (a / "t-0").exists()
        finally:
            await replicas.close()
            logs.close()

    run(scenario())


def test_a_deleted_partitions_renamed_copy_is_listed_for_removal_never_as_a_partition(tmp_path: Path) -> None:
    """A partition moved away and back: its renamed old directory (same topic id, still holding
    its partition.metadata) next to the new one is no duplicate."""
    a, b = tmp_path / "a", tmp_path / "b"
    config = BrokerConfig.from_properties().log_config()
    renamed = LogManager(a, ME).open_log("t", 0, "id-t", config).rename_for_delete()
    make_partition(b, "t", 0)
    dirs = started(a, b)
    assert [p.path for p in dirs.local_partitions()] == [b / "t-0"]
    assert dirs.deleted_directories() == [renamed]


def test_a_directory_of_another_broker_or_cluster_refuses(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    write_meta(b, 9, CLUSTER)
    with pytest.raises(DataDirUnusable, match=f"{b} belongs to broker 9, not {ME}"):
        started(a, b)
    write_meta(b, ME, "cluster-b")
    with pytest.raises(DataDirUnusable, match="belongs to cluster cluster-b"):
        started(a, b)


def test_a_directory_locked_by_another_process_refuses(tmp_path: Path) -> None:
    first = started(tmp_path / "a")
    try:
        with pytest.raises(DataDirUnusable, match="in use by another broker process"):
            LogDirs([tmp_path / "b", tmp_path / "a"]).lock()
    finally:
        first.unlock()


# -- a failed directory ------------------------------------------------------------------------

def test_an_unusable_directory_goes_offline_and_the_others_serve(tmp_path: Path) -> None:
    good, file_, bad_meta = tmp_path / "good", tmp_path / "file", tmp_path / "bad-meta"
    file_.write_text("a file where a directory should be")
    (bad_meta / "meta.properties").mkdir(parents=True)     # unreadable meta.properties
    make_partition(good, "t", 0)
    dirs = started(file_, good, bad_meta)
    assert dirs.online() == [dirs.dirs[1]]
    assert [d.path for d in dirs.offline()] == [file_, bad_meta]
    assert "cannot lock it" in (dirs.dirs[0].offline_reason or "")
    assert "meta.properties" in (dirs.dirs[2].offline_reason or "")
    assert [p.path for p in dirs.local_partitions()] == [good / "t-0"]
    assert dirs.partition_dir("new", 0) == good / "new-0"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_read_only_file_system_goes_offline(tmp_path: Path) -> None:
    """A disk mounted read-only (as Linux remounts one after I/O errors) cannot be locked."""
    read_only = tmp_path / "ro"
    read_only.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(read_only)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        dirs = started(tmp_path / "good", read_only)
        assert [d.path for d in dirs.offline()] == [read_only]
        assert "Read-only file system" in (dirs.dirs[1].offline_reason or "")
        dirs.unlock()
    finally:
        subprocess.run(["umount", str(read_only)], check=True)


def test_with_every_directory_failed_the_broker_refuses_to_start(tmp_path: Path) -> None:
    for name in ("x", "y"):
        (tmp_path / name).write_text("not a directory")
    with pytest.raises(NoLogDirUsable) as refused:
        LogDirs([tmp_path / "x", tmp_path / "y"]).lock()
    assert str(tmp_path / "x") in str(refused.value) and str(tmp_path / "y") in str(refused.value)


# -- the broker with a failed directory --------------------------------------------------------

def test_replicas_on_a_failed_directory_are_reported_offline_not_recreated(tmp_path: Path) -> None:
    """Partition 0 is in the good directory, 1 was in the one that failed: 0 is served, 1 is
    reported offline (so the controller moves it) and not created empty in the good directory;
    a partition assigned after start-up (a new topic) is created in the good directory."""
    good, failed = tmp_path / "good", tmp_path / "failed"
    make_partition(good, "t", 0)
    failed.write_text("the disk that held t-1")
    cache = FakeMetadataCache()
    cache.put_topic("t", {0: [ME, 2], 1: [ME, 2]}, states={i: PartitionState(ME, 0, [ME, 2], 1, 0) for i in (0, 1)})
    writer = FakeOfflineReplicaWriter()

    async def scenario() -> None:
        logs = LogManager([good, failed], ME)
        logs.lock()
        logs.claim(CLUSTER)
        replicas = ReplicaManager(ME, cache, logs, BrokerConfig.from_properties(), FakeIsrWriter(cache, ME),
                                  inter_broker=FakeInterBroker(), offline_writer=writer)
        try:
            await replicas.start()
            assert sorted(replicas.partitions) == [("t", 0)]
            assert replicas.leader_partition("t", 0).log.directory == good / "t-0"
            with pytest.raises(StorageError, match="log directory"):
                replicas.leader_partition("t", 1)
            await until(lambda: writer.last == [("t", 1, "id-t")], "t-1 reported offline")
            assert not (good / "t-1").exists()
            readiness = check_readiness(cache.brokers()[ME], "CONNECTED", cache, replicas.partitions,
                                        {(r.topic, r.partition) for r in replicas.in_offline_dirs()})
            assert any("offline log directory" in reason and "t-1" in reason for reason in readiness.reasons)
            cache.put_topic("new", {0: [ME]}, states={0: PartitionState(ME, 0, [ME], 1, 0)})
            replicas.notify("new")
            await until(lambda: ("new", 0) in replicas.partitions, "the new topic opened")
            assert (good / "new-0").is_dir()
            cache.remove_topic("t")         # deleted: nothing left to report
            replicas.notify("t")
            await until(lambda: writer.last == [], "the report cleared")
        finally:
            await replicas.close()
            logs.close()

    run(scenario())


# -- configuration -----------------------------------------------------------------------------

def test_log_dirs_config_with_log_dir_as_fallback(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert BrokerConfig.from_properties().log_dir_paths() == ()
    assert BrokerConfig.from_properties({"log.dir": str(a)}).log_dir_paths() == (a,)
    assert BrokerConfig.from_properties({"log.dirs": f"{a}, {b}", "log.dir": "/elsewhere"}).log_dir_paths() == (a, b)
    with pytest.raises(InvalidConfig, match="twice"):
        BrokerConfig.from_properties({"log.dirs": f"{a},{b},{a}"})
    with pytest.raises(InvalidConfig, match="expected DIR"):
        BrokerConfig.from_properties({"log.dirs": " , "})
