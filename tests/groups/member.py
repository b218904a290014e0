"""A group member process for the integration tests: consumes, appends "partition offset value"
lines to OUT (flushed before each commit, so every committed record is in the file), commits
synchronously after each poll, and writes its assignment to OUT.state. A rebalance listener
appends one JSON line per event to OUT.events: {"event": "assigned"|"revoked", "time": wall
clock, "generation", "partitions"}. ``--poll-pause S`` sleeps S seconds after each poll (a slow
member: it learns of a rebalance only at its next poll). Stops when OUT.stop exists."""
from __future__ import annotations

import argparse
import json
import os
import time

from ember.client import Consumer, TopicPartition


class EventLog:
    """Rebalance listener: logs (generation, partitions) on every assignment and revocation."""

    def __init__(self, consumer: Consumer, path: str) -> None:
        self.consumer, self.path = consumer, path

    def _log(self, event: str, partitions: set[TopicPartition]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"event": event, "time": time.time(), "generation": self.consumer.generation(),
                                "partitions": sorted(tp.partition for tp in partitions)}) + "\n")

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._log("revoked", revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._log("assigned", assigned)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("out")
    parser.add_argument("--assignor", default="range")
    parser.add_argument("--poll-pause", type=float, default=0.0)
    args = parser.parse_args()
    consumer = Consumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                        auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=3000,
                        heartbeat_interval_ms=300, partition_assignment_strategy=[args.assignor])
    listener = EventLog(consumer, args.out + ".events")
    consumer.subscribe([args.topic], listener=listener)
    deadline = time.monotonic() + 120
    with open(args.out, "a") as out:
        while not os.path.exists(args.out + ".stop") and time.monotonic() < deadline:
            records = consumer.poll(200)
            for tp, batch in records.items():
                out.writelines(f"{tp.partition} {r.offset} {r.value.decode()}\n" for r in batch)
            out.flush()
            if records:
                consumer.commit()
            state = {"generation": consumer.generation(),
                     "assignment": sorted(tp.partition for tp in consumer.assignment())}
            with open(args.out + ".state.tmp", "w") as f:
                json.dump(state, f)
            os.replace(args.out + ".state.tmp", args.out + ".state")
            if args.poll_pause:
                time.sleep(args.poll_pause)
    listener.on_partitions_revoked(consumer.assignment())     # ownership ends here
    consumer.close()


if __name__ == "__main__":
    main()
