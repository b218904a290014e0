"""Consumer-group benchmark: consume throughput with 1, 2 and 3 members, commit throughput, and
how long partitions of a member take to move when it dies or leaves.

A 3-broker LocalCluster (replication factor 2, ``group.initial.rebalance.delay.ms`` 300), one
6-partition topic of 100-byte records written once with ``send_batch``. Members are separate
processes reading records (``poll``, per-record Python objects) with auto commit; throughput counts
from the first record any member got to the last one (so joining is not counted).

* commit: ``commit()`` of 6 partitions (and of 1) in a loop, one member: commits/s (each is one
  ZooKeeper write per partition, issued in parallel);
* rebalance: 3 members (session 3 s, heartbeat 0.3 s); SIGKILL one (partitions move after the
  session timeout) or close one (LeaveGroup: they move at once); time until the survivors own
  every partition.

    .venv/bin/python bench/group_bench.py [--records 600000]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from ember.client import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from ember.launcher.local import LocalCluster

PARTITIONS = 6
VALUE_SIZE = 100


def member(bootstrap: str, topic: str, group: str, counts: "mp.Array", index: int, times: "mp.Array",
           owned: "mp.Array", stop: "mp.Event") -> None:
    """Consume until told to stop (or SIGTERM: close, leaving the group); publish records read,
    first/last record time and owned partitions."""
    leaving: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: leaving.append(1))
    with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  session_timeout_ms=3000, heartbeat_interval_ms=300) as consumer:
        while not stop.is_set() and not leaving:
            rows = sum(len(records) for records in consumer.poll(200).values())
            if rows:
                now = time.time()
                if times[2 * index] == 0:
                    times[2 * index] = now
                times[2 * index + 1] = now
                counts[index] += rows
            mask = sum(1 << tp.partition for tp in consumer.assignment())
            owned[index] = mask


class Group:
    def __init__(self, bootstrap: str, topic: str, group: str, size: int) -> None:
        self.counts = mp.Array("q", size)
        self.times = mp.Array("d", 2 * size)
        self.owned = mp.Array("q", size)
        self.stop = mp.Event()
        self.processes = [mp.Process(target=member, args=(bootstrap, topic, group, self.counts, i, self.times,
                                                          self.owned, self.stop)) for i in range(size)]
        for p in self.processes:
            p.start()

    def wait(self, condition, timeout_s: float = 120) -> float:
        started = time.monotonic()
        while not condition():
            if time.monotonic() - started > timeout_s:
                raise TimeoutError("benchmark condition not reached")
            time.sleep(0.01)
        return time.monotonic() - started

    def covered(self, alive: list[int]) -> bool:
        masks = [self.owned[i] for i in alive]
        return all(masks) and sum(bin(m).count("1") for m in masks) == PARTITIONS and \
            sum(masks) == (1 << PARTITIONS) - 1

    def close(self) -> None:
        self.stop.set()
        for p in self.processes:
            p.join(30)


def consume_throughput(bootstrap: str, topic: str, records: int, size: int) -> float:
    group = Group(bootstrap, topic, f"bench-consume-{size}", size)
    group.wait(lambda: sum(group.counts) >= records)
    first = min(t for t in group.times[0::2] if t)
    last = max(group.times[1::2])
    group.close()
    return records / (last - first)


def commit_throughput(bootstrap: str, topic: str, partitions: int, seconds: float = 3.0) -> float:
    with Consumer(bootstrap_servers=bootstrap, group_id="bench-commit") as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        n, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            consumer.commit({tp: OffsetAndMetadata(n, "") for tp in tps})
            n += 1
        return n / (time.perf_counter() - started)


def rebalance_time(bootstrap: str, topic: str, name: str, sig: int) -> float:
    """Seconds from signalling one of 3 members until the other two own every partition."""
    group = Group(bootstrap, topic, name, 3)
    group.wait(lambda: group.covered([0, 1, 2]))
    os.kill(group.processes[0].pid, sig)
    elapsed = group.wait(lambda: group.covered([1, 2]))
    group.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=600_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(Path(tmp), broker_count=3, broker_config={"group.initial.rebalance.delay.ms": "300"}) as cluster:
        bootstrap = cluster.bootstrap
        with Admin(bootstrap) as admin:
            admin.create_topic("bench", partitions=PARTITIONS, replication_factor=2)
        with Producer(bootstrap, acks=1) as producer:
            table = pa.table({"key": [b"k%d" % i for i in range(args.records)],
                              "value": [os.urandom(VALUE_SIZE)] * args.records})
            producer.send_batch("bench", table).result(120)
        print(f"{args.records} records of {VALUE_SIZE} bytes, {PARTITIONS} partitions, 3 brokers, 2 cores")
        base = None
        for size in (1, 2, 3):
            rate = consume_throughput(bootstrap, "bench", args.records, size)
            base = base or rate
            print(f"consume, {size} member(s): {rate:>10,.0f} records/s  ({rate / base:.2f}x one member)")
        for partitions in (1, PARTITIONS):
            rate = commit_throughput(bootstrap, "bench", partitions)
            print(f"commit of {partitions} partition(s): {rate:>8,.0f} commits/s  "
                  f"({rate * partitions:,.0f} offsets/s to ZooKeeper)")
        for label, sig in (("SIGKILL (session timeout 3 s)", signal.SIGKILL), ("close (LeaveGroup)", signal.SIGTERM)):
            print(f"partitions moved after {label}: {rebalance_time(bootstrap, 'bench', f'bench-{sig}', sig):.2f} s")


if __name__ == "__main__":
    main()
