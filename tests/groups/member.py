"""A group member process for the integration tests: consumes, appends "partition offset value"
lines to OUT (flushed before each commit, so every committed record is in the file), commits
synchronously after each poll, and writes its assignment to OUT.state. Stops when OUT.stop exists."""
from __future__ import annotations

import argparse
import json
import os
import time

from ember.client import Consumer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("out")
    parser.add_argument("--assignor", default="range")
    args = parser.parse_args()
    consumer = Consumer(args.topic, bootstrap_servers=args.bootstrap, group_id=args.group,
                        auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=3000,
                        heartbeat_interval_ms=300, partition_assignment_strategy=[args.assignor])
    deadline = time.monotonic() + 120
    with open(args.out, "a") as out:
        while not os.path.exists(args.out + ".stop") and time.monotonic() < deadline:
            records = consumer.poll(200)
            for tp, batch in records.items():
                out.writelines(f"{tp.partition} {r.offset} {r.value.decode()}\n" for r in batch)
            out.flush()
            if records:
                consumer.commit()
            state = {"generation": consumer._membership.generation,
                     "assignment": sorted(tp.partition for tp in consumer.assignment())}
            with open(args.out + ".state.tmp", "w") as f:
                json.dump(state, f)
            os.replace(args.out + ".state.tmp", args.out + ".state")
    consumer.close()


if __name__ == "__main__":
    main()
