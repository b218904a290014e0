"""``ember transactions list|describe|producers|abort``: inspect transactions and end a hanging one
(kafka-transactions.sh's features: list, describe, describe-producers, abort --start-offset)."""
from __future__ import annotations

import argparse
import time

from ember.client import Admin, TopicPartition
from ember.commands.topics import add_bootstrap, client_options, print_table


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("transactions", help="list and describe transactions, show a partition's "
                                                        "producers, abort a hanging transaction")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="every transactional id: its producer id and state")
    listing.add_argument("--state", action="append", default=[], metavar="STATE",
                         help="only this state (Kafka's names: Ongoing, PrepareCommit, CompleteAbort...; repeatable)")
    listing.set_defaults(func=list_transactions)

    describe = actions.add_parser("describe", help="a transactional id's state, timeout and partitions")
    describe.add_argument("transactional_id")
    describe.set_defaults(func=describe_transaction)

    producers = actions.add_parser("producers", help="a partition's producers at its leader, with the offset "
                                                     "where each one's open transaction starts")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    producers.set_defaults(func=describe_producers)

    abort = actions.add_parser("abort", help="end a hanging transaction (open at a partition while its "
                                             "coordinator no longer knows it) with an abort marker")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, required=True,
                       help="where the transaction starts in the partition (`ember transactions producers`)")
    abort.set_defaults(func=abort_transaction)

    for action in (listing, describe, producers, abort):
        add_bootstrap(action)


def list_transactions(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        rows = [("transactional id", "producer id", "state")]
        rows += [(t.transactional_id, str(t.producer_id), t.state) for t in admin.list_transactions(args.state)]
    print_table(rows)
    return 0


def describe_transaction(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        d = admin.describe_transaction(args.transactional_id)
    started = "-" if d.start_ms < 0 else \
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(d.start_ms / 1000))} UTC " \
        f"({(time.time() * 1000 - d.start_ms) / 1000:.0f} s ago)"
    print(f"transactional id {d.transactional_id}  state {d.state}  producer {d.producer_id} epoch {d.producer_epoch}  "
          f"timeout {d.timeout_ms} ms  started {started}")
    for tp in d.partitions:
        print(f"  partition {tp.topic}-{tp.partition}")
    for group in d.groups:
        print(f"  offsets of group {group}")
    return 0


def describe_producers(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        found = admin.describe_producers(TopicPartition(args.topic, args.partition))
    rows = [("producer id", "epoch", "last sequence", "last timestamp", "coordinator epoch", "transaction from")]
    rows += [(str(p.producer_id), str(p.producer_epoch), str(p.last_sequence), str(p.last_timestamp),
              str(p.coordinator_epoch), str(p.current_txn_start_offset) if p.current_txn_start_offset >= 0 else "-")
             for p in found]
    print_table(rows)
    return 0


def abort_transaction(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        producer = admin.abort_transaction(TopicPartition(args.topic, args.partition), args.start_offset)
    print(f"aborted the transaction of producer {producer.producer_id} (epoch {producer.producer_epoch}) open at "
          f"{args.topic}-{args.partition} since offset {args.start_offset}")
    return 0
