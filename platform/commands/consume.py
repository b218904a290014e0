"""``ember consume TOPIC``: print records to stdout."""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import cast

from ember.client import Consumer, ConsumerRecord, TopicPartition
from ember.commands.topics import add_bootstrap, client_options


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("consume", help="print a topic's records")
    parser.add_argument("topic")
    add_bootstrap(parser)
    parser.add_argument("--from-beginning", action="store_true", help="start at the oldest record (default: new records only)")
    parser.add_argument("--partition", type=int, help="read only this partition")
    parser.add_argument("--offset", type=int, help="start at this offset (needs --partition)")
    parser.add_argument("--max-messages", type=int, help="exit after this many records")
    parser.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    parser.add_argument("--group", help="consumer group id (passed to the consumer)")
    parser.add_argument("--print-key", action="store_true", help="print KEY<separator>VALUE")
    parser.add_argument("--print-offset", action="store_true", help="prefix partition:offset")
    parser.add_argument("--print-timestamp", action="store_true", help="prefix the record timestamp (UTC)")
    parser.add_argument("--print-headers", action="store_true", help="append the headers")
    parser.add_argument("--separator", default="\t", help="between printed fields (default: tab)")
    parser.set_defaults(func=consume)


def consume(args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        raise SystemExit("error: --offset needs --partition")
    timeout_ms = args.timeout_ms if args.timeout_ms is not None else float("inf")
    consumer = Consumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                        auto_offset_reset="earliest" if args.from_beginning else "latest",
                        consumer_timeout_ms=timeout_ms, **client_options(args))
    count = 0
    out = sys.stdout.buffer
    try:
        if args.partition is None:
            consumer.subscribe([args.topic])
        else:
            tp = TopicPartition(args.topic, args.partition)
            consumer.assign([tp])
            if args.offset is not None:
                consumer.seek(tp, args.offset)
        for record in consumer:
            out.write(_format(record, args))
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
        out.flush()
    except BrokenPipeError:
        pass
    finally:
        consumer.close()
        print(f"{count} records consumed from {args.topic}", file=sys.stderr)
    return 0


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
