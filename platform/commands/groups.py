"""``ember groups list|describe|reset-offsets|delete``: inspect and administer consumer groups
(kafka-consumer-groups.sh's features, with its flag names for --reset-offsets)."""
from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime, timezone

from ember.client import Admin, TopicPartition
from ember.commands.topics import add_bootstrap, client_options, print_table
from ember.errors import NonEmptyGroup


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("groups", help="list, describe, reset and delete consumer groups")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="every group and its state")
    listing.set_defaults(func=list_groups)

    describe = actions.add_parser("describe", help="state, members, and per partition: committed offset, "
                                                   "log end, lag, owner")
    describe.add_argument("group")
    describe.set_defaults(func=describe_group)

    reset = actions.add_parser("reset-offsets", help="move committed offsets of groups whose consumers are stopped "
                                                      "(kafka-consumer-groups --reset-offsets)")
    reset.add_argument("group", nargs="?", help="the group (or --group G, or --all-groups)")
    reset.add_argument("--group", dest="group_options", action="append", default=[], metavar="G",
                       help="a group to reset (repeatable; Kafka's spelling of GROUP)")
    reset.add_argument("--all-groups", action="store_true",
                       help="every group of the cluster (groups with running consumers are refused, the others reset)")
    scope = reset.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                       help="topic to reset, all its partitions or those listed (repeatable)")
    scope.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for (the default without --topic)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the oldest retained record")
    target.add_argument("--to-latest", action="store_true", help="the log end (skip everything)")
    target.add_argument("--to-current", action="store_true",
                        help="the committed offset (the log end where there is none): re-commits, clamped to the log")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="the committed offset plus N (negative: back), clamped to the log")
    target.add_argument("--to-datetime", metavar="ISO", help="first record at or after this time "
                                                               "(e.g. 2024-05-01T12:00:00Z; no zone = UTC)")
    target.add_argument("--by-duration", metavar="PnDTnHnMnS",
                        help="first record at or after this long ago, an ISO-8601 duration as Java's Duration: "
                             "PT30M, PT6H, P1DT12H")
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
    print_table(rows)
    return 0


def reset_offsets(args: argparse.Namespace) -> int:
    """Plans (and with --execute commits) each group's new offsets; a group with running members
    is refused by --execute and only noted by a dry run. Exits 1 if a group was refused."""
    to, value = _target(args)
    scope = _scope(args.topic)
    refused = 0
    with Admin(args.bootstrap, **client_options(args)) as admin:
        groups = _groups(args, admin)
        for group in groups:
            plan = admin.plan_reset(group, scope, to, value)
            try:
                if args.execute:
                    admin.reset_offsets(group, {tp: new for tp, (_, new) in plan.items()})
                else:
                    admin.check_inactive(group)
            except NonEmptyGroup as exc:
                if args.execute:
                    refused += 1
                    print(f"error: NonEmptyGroup: {exc}", file=sys.stderr)
                    continue
                print(f"note: {exc}; --execute is refused until then", file=sys.stderr)
            if len(groups) > 1:
                print(f"group {group}")
            rows = [("topic", "partition", "committed", "new offset")]
            rows += [(tp.topic, str(tp.partition), _opt(old), str(new)) for tp, (old, new) in sorted(plan.items())]
            print_table(rows)
            print(f"reset {len(plan)} partition(s) of group {group}" if args.execute
                  else "dry run: nothing changed (add --execute to commit these offsets)")
    return 1 if refused else 0


def _groups(args: argparse.Namespace, admin: Admin) -> list[str]:
    """The groups named (GROUP, --group) or, with --all-groups, every group of the cluster."""
    named = ([args.group] if args.group else []) + args.group_options
    if args.all_groups == bool(named):
        raise SystemExit("error: give a group (GROUP or --group G) or --all-groups")
    if named:
        return named
    listing = admin.list_groups()
    for broker_id, reason in sorted(listing.unreachable.items()):
        print(f"note: broker {broker_id} did not answer, the groups it coordinates are left out ({reason})",
              file=sys.stderr)
    return list(listing)


def _scope(topics: list[str]) -> list[str | TopicPartition]:
    """``--topic`` values ``T`` or ``T:0,1`` as topic names and single partitions."""
    result: list[str | TopicPartition] = []
    for text in topics:
        name, sep, listed = text.partition(":")
        try:
            result += [TopicPartition(name, int(p)) for p in listed.split(",")] if sep else [name]
        except ValueError:
            raise SystemExit(f"error: --topic expects TOPIC or TOPIC:P,P..., got {text!r}") from None
    return result


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
    if args.to_current:
        return "current", None
    if args.to_offset is not None:
        return "offset", args.to_offset
    if args.shift_by is not None:
        return "shift", args.shift_by
    if args.by_duration is not None:
        return "timestamp", int(time.time() * 1000) - _duration_ms(args.by_duration)
    try:
        when = datetime.fromisoformat(args.to_datetime.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(f"error: --to-datetime expects an ISO 8601 time, got {args.to_datetime!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return "timestamp", int(when.timestamp() * 1000)


#: Java's Duration.parse format, which kafka-consumer-groups --by-duration takes: PnDTnHnMn.nS.
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{1,9}))?S)?)?",
                       re.IGNORECASE)


def _duration_ms(text: str) -> int:
    """An ISO-8601 duration (days, hours, minutes, seconds, as Java's Duration) in milliseconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or match.group(3) == "T" or text.strip().upper().lstrip("+-") == "P":
        raise SystemExit(f"error: --by-duration expects an ISO-8601 duration like PT30M, PT6H or P1DT12H "
                         f"(PnDTnHnMn.nS), got {text!r}")
    sign, days, _, hours, minutes, seconds, fraction = match.groups()
    total = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000 + int(seconds or 0) * 1000
    if fraction:
        millis = int(fraction.ljust(3, "0")[:3])
        total += -millis if (seconds or "").startswith("-") else millis
    return -total if sign == "-" else total


def _partitions(tps: tuple[TopicPartition, ...]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps)


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)
