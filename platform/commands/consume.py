"""``ember consume TOPIC``: print records to stdout."""
from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from typing import cast

from ember.client import Consumer, ConsumerRecord, TopicPartition
from ember.commands.topics import TopicCheck, add_bootstrap, client_options

#: While no record arrives, how often the command checks that the topic still exists.
TOPIC_CHECK_S = 5.0
#: After this long without a record, the command says (once, on stderr) that it is waiting and why.
IDLE_NOTICE_S = 3.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("consume", help="print a topic's records")
    parser.add_argument("topic")
    add_bootstrap(parser)
    parser.add_argument("--from-beginning", action="store_true", help="start at the oldest record (default: new records only)")
    parser.add_argument("--partition", type=int, help="read only this partition")
    parser.add_argument("--offset", type=int, help="start at this offset (needs --partition)")
    parser.add_argument("--max-messages", type=int, help="exit after this many records")
    parser.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    parser.add_argument("--wait-for-topic", action="store_true",
                        help="if the topic does not exist, wait for it to be created (up to --timeout-ms) "
                             "instead of failing at once")
    parser.add_argument("--group", help="consumer group id (passed to the consumer)")
    parser.add_argument("--print-key", action="store_true", help="print KEY<separator>VALUE")
    parser.add_argument("--print-offset", action="store_true", help="prefix partition:offset")
    parser.add_argument("--print-timestamp", action="store_true", help="prefix the record timestamp (UTC)")
    parser.add_argument("--print-headers", action="store_true", help="append the headers")
    parser.add_argument("--separator", default="\t", help="between printed fields (default: tab)")
    parser.set_defaults(func=consume)


def consume(args: argparse.Namespace) -> int:
    """Prints records until --max-messages, --timeout-ms without a record, or the topic is deleted.

    Polls for at most the records still wanted, so the consumer's position (what a group commits)
    is always just past the last record printed."""
    if args.offset is not None and args.partition is None:
        raise SystemExit("error: --offset needs --partition")
    idle_s = args.timeout_ms / 1000 if args.timeout_ms is not None else float("inf")
    with TopicCheck(args) as check:   # fails at once when no broker answers or the topic does not exist
        if args.wait_for_topic:
            info = check.wait_for(args.topic, idle_s, "--wait-for-topic")
            if info is None:
                raise SystemExit(f"error: topic {args.topic!r} still does not exist after {args.timeout_ms} ms "
                                 f"(--timeout-ms)")
        else:
            info = check.topic(args.topic)
            if info is None:
                raise check.missing(args.topic, "--wait-for-topic")
        if args.partition is not None and info.partitions and not 0 <= args.partition < len(info.partitions):
            raise SystemExit(f"error: topic {args.topic!r} has {len(info.partitions)} partition(s); there is no "
                             f"partition {args.partition}")
        consumer = Consumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                            auto_offset_reset="earliest" if args.from_beginning else "latest", **client_options(args))
        count = 0
        deleted = announced = noticed = False
        out = sys.stdout.buffer
        try:
            if args.partition is None:
                consumer.subscribe([args.topic])
            else:
                tp = TopicPartition(args.topic, args.partition)
                consumer.assign([tp])
                if args.offset is not None:
                    consumer.seek(tp, args.offset)
            idle_since = checked = time.monotonic()
            while args.max_messages is None or count < args.max_messages:
                wanted = None if args.max_messages is None else args.max_messages - count
                remaining = idle_s - (time.monotonic() - idle_since)
                polled = consumer.poll(max(min(1000.0, remaining * 1000), 0), max_records=wanted)
                for records in polled.values():
                    for record in records:
                        out.write(_format(record, args))
                    count += len(records)
                now = time.monotonic()
                if polled:
                    idle_since = now
                    continue
                timed_out = now - idle_since >= idle_s
                if not noticed and not timed_out and now - idle_since >= IDLE_NOTICE_S:
                    noticed = True
                    print(_waiting(args, count), file=sys.stderr, flush=True)
                if timed_out or now - checked >= TOPIC_CHECK_S:
                    checked = now
                    gone = not check.listed(args.topic)
                    if gone and (timed_out or not args.wait_for_topic):
                        deleted = True
                        break
                    if gone and not announced:   # --wait-for-topic: say it once, keep waiting
                        print(f"topic {args.topic!r} was deleted: waiting for it to be created again "
                              f"(--wait-for-topic)", file=sys.stderr, flush=True)
                    announced = gone
                if timed_out:
                    break
            out.flush()
        except BrokenPipeError:
            pass
        finally:
            consumer.close(autocommit=not deleted)   # a deleted topic's offsets cannot be committed
    if deleted:
        hint = ("and not created again within --timeout-ms" if args.wait_for_topic
                else "(pass --wait-for-topic to wait for it to be created again)")
        raise SystemExit(f"error: topic {args.topic!r} was deleted {hint}; {count} records consumed")
    print(f"{count} records consumed from {args.topic}", file=sys.stderr)
    return 0


def _waiting(args: argparse.Namespace, count: int) -> str:
    """The one line a consumer prints when nothing has arrived for a while: that it waits, why the
    topic may look empty (it starts at the end), and how it stops."""
    if count:
        why = f"{count} record(s) so far"
    elif args.offset is not None:
        why = f"none at or after offset {args.offset} of partition {args.partition}"
    elif args.from_beginning:
        why = "none in the topic yet" + (f", or none after group {args.group}'s committed offsets" if args.group
                                         else "")
    else:
        start = f"group {args.group}'s committed offsets, else at " if args.group else ""
        why = (f"none new: consume starts at {start}the end of the topic, so it prints records produced from "
               f"now on; --from-beginning reads the ones already there")
    stop = "Ctrl-C to stop" if args.timeout_ms is None else \
        f"exits after {args.timeout_ms} ms without a record (--timeout-ms), or Ctrl-C"
    return f"waiting for records in {args.topic}: {why}; {stop}"


def _format(record: ConsumerRecord, args: argparse.Namespace) -> bytes:
    sep = args.separator.encode()
    fields = []
    if args.print_offset:
        fields.append(f"{record.partition}:{record.offset}".encode())
    if args.print_timestamp:
        when = datetime.fromtimestamp(record.timestamp / 1000, timezone.utc)
        fields.append(when.isoformat(timespec="milliseconds").replace("+00:00", "Z").encode())
    # The consumer has no deserializers: keys and values are bytes (ConsumerRecord says object).
    if args.print_key:
        fields.append(b"null" if record.key is None else cast(bytes, record.key))
    fields.append(b"null" if record.value is None else cast(bytes, record.value))
    if args.print_headers:
        fields.append(b",".join(k.encode() + b"=" + (v or b"") for k, v in record.headers))
    return sep.join(fields) + b"\n"
