"""``ember groups list|describe|reset-offsets|delete``: inspect and administer consumer groups."""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Sequence

from ember.client import Admin, TopicPartition
from ember.commands.topics import add_bootstrap, client_options


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("groups", help="list, describe, reset and delete consumer groups")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="every group and its state")
    listing.set_defaults(func=list_groups)

    describe = actions.add_parser("describe", help="state, members, and per partition: committed offset, "
                                                   "log end, lag, owner")
    describe.add_argument("group")
    describe.set_defaults(func=describe_group)

    reset = actions.add_parser("reset-offsets", help="move committed offsets (only while no member runs)")
    reset.add_argument("group")
    reset.add_argument("--topic", action="append", default=[],
                       help="topic to reset (repeatable; default: every topic the group has offsets for)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the oldest retained record")
    target.add_argument("--to-latest", action="store_true", help="the log end (skip everything)")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    target.add_argument("--to-datetime", metavar="ISO", help="first record at or after this time "
                                                               "(e.g. 2024-05-01T12:00:00Z; no zone = UTC)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.set_defaults(func=reset_offsets)

    delete = actions.add_parser("delete", help="delete a group without members and its committed offsets")
    delete.add_argument("group")
    delete.set_defaults(func=delete_group)

    for action in (listing, describe, reset, delete):
        add_bootstrap(action)


def list_groups(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        listing = admin.list_groups()
    for group_id, state in listing.items():
        print(f"{group_id}\t{state}")
    for broker_id, reason in sorted(listing.unreachable.items()):
        print(f"note: broker {broker_id} did not answer, the groups it coordinates are not listed ({reason})",
              file=sys.stderr)
    return 0


def describe_group(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        d = admin.describe_group(args.group)
    print(f"group {d.group_id}  state {d.state}  generation {d.generation}  assignor {d.protocol or '-'}  "
          f"members {len(d.members)}")
    for m in d.members:
        print(f"  member {m.member_id} ({m.client_id}): {_partitions(m.assignment) or 'no partitions'}")
    rows = [("topic", "partition", "committed", "log end", "lag", "member")]
    rows += [(p.partition.topic, str(p.partition.partition), _opt(p.committed), _opt(p.log_end), _opt(p.lag),
              p.member_id or "-") for p in d.partitions]
    _table(rows)
    return 0


def reset_offsets(args: argparse.Namespace) -> int:
    to, value = _target(args)
    with Admin(args.bootstrap, **client_options(args)) as admin:
        plan = admin.plan_reset(args.group, args.topic, to, value)
        if args.execute:
            admin.reset_offsets(args.group, {tp: new for tp, (_, new) in plan.items()})
    rows = [("topic", "partition", "committed", "new offset")]
    rows += [(tp.topic, str(tp.partition), _opt(old), str(new)) for tp, (old, new) in sorted(plan.items())]
    _table(rows)
    print(f"reset {len(plan)} partition(s) of group {args.group}" if args.execute
          else "dry run: nothing changed (add --execute to commit these offsets)")
    return 0


def delete_group(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        admin.delete_group(args.group)
    print(f"deleted group {args.group}")
    return 0


def _target(args: argparse.Namespace) -> tuple[str, int | None]:
    if args.to_earliest:
        return "earliest", None
    if args.to_latest:
        return "latest", None
    if args.to_offset is not None:
        return "offset", args.to_offset
    try:
        when = datetime.fromisoformat(args.to_datetime.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(f"error: --to-datetime expects an ISO 8601 time, got {args.to_datetime!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return "timestamp", int(when.timestamp() * 1000)


def _partitions(tps: tuple[TopicPartition, ...]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps)


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
