"""``ember produce TOPIC``: one record per stdin line (optionally ``KEY<sep>VALUE``)."""
from __future__ import annotations

import argparse
import sys

from ember.client import Producer
from ember.commands.topics import TopicCheck, add_bootstrap, client_options


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("produce", help="send stdin lines to a topic, one record per line")
    parser.add_argument("topic")
    add_bootstrap(parser)
    parser.add_argument("--key-separator", metavar="SEP",
                        help="split each line at the first SEP into key and value (lines without it have no key)")
    parser.add_argument("--acks", choices=["0", "1", "all"], default="all")
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--max-request-size", type=int, default=1024 * 1024, metavar="BYTES",
                        help="largest request (so largest record) the producer sends (max.request.size; default: "
                             "1048576); the topic's max.message.bytes must allow larger records too")
    parser.add_argument("--linger-ms", type=float, default=5)
    parser.add_argument("--compression", choices=["none", "lz4", "zstd"], default="none")
    parser.add_argument("--wait-for-topic", action="store_true",
                        help="if the topic does not exist, wait up to --max-block-ms for it to be created "
                             "(default: fail at once, naming the command that creates it)")
    parser.add_argument("--max-block-ms", type=int, default=60000, metavar="MS",
                        help="longest a send waits for topic metadata or buffer space (default: 60000)")
    parser.set_defaults(func=produce)


def produce(args: argparse.Namespace) -> int:
    acks = "all" if args.acks == "all" else int(args.acks)
    failures: list[BaseException] = []
    count = 0
    with TopicCheck(args) as check:   # fails at once when no broker answers
        if args.wait_for_topic:
            if check.topic(args.topic) is None:
                print(f"topic {args.topic!r} does not exist yet: waiting up to {args.max_block_ms} ms for it to be "
                      f"created (--wait-for-topic, --max-block-ms)", file=sys.stderr, flush=True)
        elif (info := check.topic(args.topic)) is None:
            raise check.missing(args.topic, "--wait-for-topic")
        elif args.partition is not None and args.partition >= len(info.partitions):
            raise SystemExit(f"error: topic {args.topic!r} has {len(info.partitions)} partitions (0 to "
                             f"{len(info.partitions) - 1}), so there is no partition {args.partition}; add "
                             f"partitions with `ember topics alter {args.topic} --partitions {args.partition + 1}"
                             f"{check._bootstrap_option()}`, or send to one that exists")
    with Producer(args.bootstrap, acks=acks, linger_ms=args.linger_ms, compression_type=args.compression,
                  max_block_ms=args.max_block_ms, max_request_size=args.max_request_size,
                  **client_options(args)) as producer:
        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            key = None
            if args.key_separator is not None:
                head, sep, tail = line.partition(args.key_separator.encode())
                if sep:
                    key, line = head, tail
            producer.send(args.topic, line, key=key, partition=args.partition).add_errback(failures.append)
            count += 1
        producer.flush()
    if failures:
        print(f"{count - len(failures)} of {count} records sent to {args.topic}; first error: "
              f"{type(failures[0]).__name__}: {failures[0]}", file=sys.stderr)
        return 1
    print(f"{count} records sent to {args.topic}", file=sys.stderr)
    return 0
