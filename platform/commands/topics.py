"""``ember topics create|list|describe|delete|alter|delete-records|elect-leaders|reassign`` and
the ``--bootstrap`` / ``--command-config`` options the client commands share."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from ember.client import Admin, PartitionDescription, TopicPartition
from ember.client.metadata import MetadataClient, TopicInfo
from ember.errors import (
    BrokerNotAvailable,
    ElectionNotNeeded,
    ErrorCode,
    InvalidConfig,
    OffsetOutOfRange,
    TopicAlreadyExists,
    error_for_code,
)
from ember.launcher.local import DEFAULT_DATA, local_bootstrap
from ember.security.client import ClientSecurity, SecurityOptions, options_from_properties
from ember.wire.config_def import read_properties

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
#: Where a CLI user sets security (the ``settings_from`` of the commands' clients, which hints name).
COMMAND_CONFIG = "the --command-config file"


def bootstrap_default() -> str:
    """What ``--bootstrap`` is when not given: $EMBER_BOOTSTRAP, else the brokers of the cluster
    ``ember cluster up`` started under $EMBER_DATA (default data/cluster), else 127.0.0.1:9092
    (broker 1 of a cluster started with the default ports)."""
    return os.environ.get("EMBER_BOOTSTRAP") or local_bootstrap(Path(DEFAULT_DATA)) or DEFAULT_BOOTSTRAP


def no_cluster_hint(bootstrap: str) -> str | None:
    """What to do when no broker answers at ``bootstrap`` because it is only the last-resort default
    (no --bootstrap, no $EMBER_BOOTSTRAP, no cluster recorded under $EMBER_DATA): typically a client
    command run before ``ember cluster up``, or with another data directory. None otherwise."""
    if bootstrap != DEFAULT_BOOTSTRAP or os.environ.get("EMBER_BOOTSTRAP") or local_bootstrap(Path(DEFAULT_DATA)):
        return None
    return (f"no cluster is running under {DEFAULT_DATA} (where client commands look for one; $EMBER_DATA "
            f"sets it): start one with `ember cluster up --data {DEFAULT_DATA}`, or give a running broker's "
            f"address with --bootstrap")


def secure_cluster_hint(command_config: str | None) -> str | None:
    """What to do when a broker refused a client command's plaintext connection because its
    listeners need TLS: the command had no client configuration (None when it had one)."""
    if command_config is not None:
        return None
    written = Path(DEFAULT_DATA) / "tls" / "client.properties"
    where = (f": `ember cluster up --secure` wrote it at {written}" if written.is_file()
             else " (`ember cluster up --secure` writes it as <data>/tls/client.properties)")
    return (f"the cluster is secure and this command had no client configuration: pass it with --command-config "
            f"FILE or export EMBER_CLIENT_CONFIG=FILE{where}")


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", default=bootstrap_default(), metavar="HOST:PORT[,...]",
                        help=f"brokers to bootstrap from (default: $EMBER_BOOTSTRAP, else the cluster `ember cluster "
                             f"up` started under $EMBER_DATA or {DEFAULT_DATA}, else {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--command-config", default=os.environ.get("EMBER_CLIENT_CONFIG"), metavar="FILE",
                        help="client properties with Kafka's names: security.protocol, ssl.truststore.location, "
                             "ssl.keystore.location (PEM files), sasl.mechanism, sasl.jaas.config "
                             "(default: $EMBER_CLIENT_CONFIG)")


def print_table(rows: Sequence[tuple[str, ...]]) -> None:
    """Rows as right-aligned columns, indented two spaces (the first row is the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths)))


def client_options(args: argparse.Namespace) -> SecurityOptions:
    """The security keywords of ``--command-config`` (none without it, or for a caller's own
    Namespace that has no such attribute), marked so that hints name Kafka's properties."""
    if not hasattr(args, "command_config"):
        return SecurityOptions()
    if not args.command_config:
        return SecurityOptions(settings_from=COMMAND_CONFIG)
    path = Path(args.command_config)
    if not path.is_file():
        raise InvalidConfig(f"--command-config {path}: no such file")
    options = options_from_properties(read_properties(path), str(path))
    options["settings_from"] = COMMAND_CONFIG
    return options


class TopicCheck:
    """A command's own metadata connection, so that it says at once, in one line naming the fix, that
    no broker answers or that a topic does not exist, instead of a client waiting out its timeout
    (``produce`` and ``consume`` ask before they start, and ``consume`` again while it waits)."""

    def __init__(self, args: argparse.Namespace, request_timeout_ms: int = 10000,
                 security: SecurityOptions | None = None) -> None:
        """``security``: the command's security keywords when it has more than ``--command-config``'s."""
        self.args = args
        self._metadata = MetadataClient(args.bootstrap, request_timeout_ms=request_timeout_ms,
                                        security=ClientSecurity.from_options(
                                            client_options(args) if security is None else security, "ember"))

    def __enter__(self) -> "TopicCheck":
        return self

    def __exit__(self, *exc: object) -> None:
        self._metadata.close()

    def topic(self, name: str) -> TopicInfo | None:
        """``name``'s metadata, or None when the cluster answers that it does not exist (asking for
        it by name: a broker with ``auto.create.topics.enable`` creates it, as for any client)."""
        info = self._fetch([name]).get(name)
        if info is None or info.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        if info.error_code and info.error_code != ErrorCode.LEADER_NOT_AVAILABLE:
            raise error_for_code(info.error_code, info.error_message or f"metadata for topic {name!r} failed")
        return info

    def listed(self, name: str) -> bool:
        """Whether the cluster lists ``name`` (asks for every topic, so it never auto-creates one)."""
        return name in self._fetch(None)

    def wait_for(self, name: str, timeout_s: float, why: str) -> TopicInfo | None:
        """``name``'s metadata, saying once on stderr that it is waiting; None after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        info = self.topic(name)
        if info is None:
            limit = "" if timeout_s == float("inf") else f" up to {timeout_s * 1000:.0f} ms"
            print(f"topic {name!r} does not exist yet: waiting{limit} for it to be created ({why})",
                  file=sys.stderr, flush=True)
        while info is None and time.monotonic() < deadline:
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
            info = self.topic(name)
        return info

    def missing(self, name: str, wait_option: str) -> SystemExit:
        """The one-line error for a topic that does not exist, naming the command that creates it."""
        return SystemExit(f"error: topic {name!r} does not exist; create it with `ember topics create {name} "
                          f"--partitions N --replication-factor R{self._bootstrap_option()}`, or pass "
                          f"{wait_option} to wait for it")

    def _bootstrap_option(self) -> str:
        return "" if self.args.bootstrap == bootstrap_default() else f" --bootstrap {self.args.bootstrap}"

    def _fetch(self, names: list[str] | None) -> dict[str, TopicInfo]:
        try:
            return self._metadata.refresh(names)
        except BrokerNotAvailable as exc:
            detail = str(exc).removesuffix(f" ({exc.hint})").removeprefix("no broker reachable: ")
            hint = no_cluster_hint(self.args.bootstrap)
            if hint:
                raise SystemExit(f"error: no broker reachable at {self.args.bootstrap} ({detail}): {hint}") from None
            raise SystemExit(f"error: no broker reachable at {self.args.bootstrap} ({detail}); is the cluster up? "
                             f"Give a broker's address with --bootstrap or $EMBER_BOOTSTRAP "
                             f"(`ember cluster up` prints it)") from None


def parse_configs(pairs: list[str], option: str = "--config", strip: bool = True) -> dict[str, str]:
    """``["k=v", ...]`` (the values of ``option``) as a dict; exits with a usage error on a malformed pair.
    ``strip=False`` keeps a value's spaces (a separator may be one)."""
    configs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"error: {option} expects NAME=VALUE, got {pair!r}")
        configs[key.strip()] = value.strip() if strip else value
    return configs


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("topics", help="create, list, describe, delete and configure topics")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=1, metavar="N", help="number of partitions (default 1)")
    create.add_argument("--replication-factor", type=int, default=1, metavar="N",
                        help="copies of each partition, on distinct brokers (default 1)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="when the topic exists already, leave it as it is, say so and exit 0 (its "
                             "partitions and configs are not compared with these)")
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="topic config, e.g. retention.ms=60000 (repeatable)")
    create.set_defaults(func=create_topic)

    listing = actions.add_parser("list", help="list topics")
    listing.set_defaults(func=list_topics)

    describe = actions.add_parser("describe", help="partitions (leader, replicas, ISR, offsets) and configs")
    describe.add_argument("topic", nargs="*", help="topics to describe (default: all)")
    only = describe.add_mutually_exclusive_group()
    for flag, text in _PARTITION_FILTERS.items():
        only.add_argument(flag, action="store_true", help=f"list only partitions {text} (as kafka-topics.sh)")
    describe.set_defaults(func=describe_topics)

    delete = actions.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("topic")
    delete.set_defaults(func=delete_topic)

    alter = actions.add_parser("alter", help="set or reset topic configs, add partitions")
    alter.add_argument("topic")
    alter.add_argument("--config", action="append", default=[], metavar="NAME=VALUE", help="set a config (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="NAME",
                       help="reset a config to its default (repeatable)")
    alter.add_argument("--partitions", type=int, metavar="N",
                       help="grow the topic to N partitions (never fewer; keys hash onto N from then on)")
    alter.set_defaults(func=alter_topic)

    delete_records = actions.add_parser("delete-records", help="delete a partition's records before an offset")
    delete_records.add_argument("topic")
    delete_records.add_argument("--partition", type=int, required=True)
    delete_records.add_argument("--offset", type=int, required=True,
                                help="the new log start; -1: the high watermark (delete everything readable)")
    delete_records.set_defaults(func=delete_topic_records)

    elect = actions.add_parser("elect-leaders", help="move leadership back to preferred replicas (the first "
                               "of each assignment) that are in sync")
    elect.add_argument("--topic", help="only this topic (default: every partition of the cluster)")
    elect.add_argument("--partition", type=int, help="only this partition of --topic")
    elect.add_argument("--unclean", action="store_true", help="instead, give partitions without a live leader "
                       "one, out of sync if no in-sync replica is alive (records it lacks are lost)")
    elect.set_defaults(func=elect_leaders)

    reassign = actions.add_parser("reassign", help="move partitions to new replicas")
    reassign.add_argument("topic", nargs="?", help="topic of --partition")
    reassign.add_argument("--partition", type=int, help="partition to move")
    reassign.add_argument("--replicas", help="new replica broker ids, preferred leader first, e.g. 2,3,1")
    reassign.add_argument("--plan", type=Path, help='JSON plan: {"partitions": [{"topic", "partition", '
                          '"replicas"}, ...]} (Kafka\'s reassignment file)')
    reassign.set_defaults(func=reassign_partitions)

    for action in (create, listing, describe, delete, alter, delete_records, elect, reassign):
        add_bootstrap(action)


def create_topic(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        try:
            admin.create_topic(args.topic, args.partitions, args.replication_factor, parse_configs(args.config))
        except TopicAlreadyExists:
            if not args.if_not_exists:
                raise
            print(f"topic {args.topic} already exists (--if-not-exists: left as it is)")
            return 0
    print(f"created topic {args.topic} ({args.partitions} partitions, replication factor {args.replication_factor})")
    return 0


def list_topics(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        for name in admin.list_topics():
            print(name)
    return 0


#: ``topics describe``'s partition filters (kafka-topics.sh's flags) and what they keep.
_PARTITION_FILTERS = {
    "--under-replicated-partitions": "whose ISR is smaller than their replicas (a replica is down or behind)",
    "--unavailable-partitions": "without a live leader (nobody can read or write them)",
    "--under-min-isr-partitions": "whose ISR is smaller than the topic's min.insync.replicas (acks=all writes are "
                                  "refused), or without a leader",
    "--at-min-isr-partitions": "whose ISR is exactly the topic's min.insync.replicas (one more lost replica "
                               "refuses acks=all writes)",
}


def describe_topics(args: argparse.Namespace) -> int:
    """Every partition of the topics, or with a filter flag only the partitions it keeps (topics
    without such partitions left out, and a line on stderr when there are none at all)."""
    wanted = next((flag for flag in _PARTITION_FILTERS if getattr(args, _dest(flag))), None)
    shown = 0
    with Admin(args.bootstrap, **client_options(args)) as admin:
        for name in args.topic or admin.list_topics():
            description = admin.describe_topic(name, configs=wanted is None)
            partitions = description.partitions
            if wanted is None:
                overrides = ", ".join(f"{k}={v}" for k, v in sorted(description.config.items()))
                print(f"topic {name}  partitions {len(partitions)}  configs: {overrides or '-'}")
            else:
                min_isr = int(admin.describe_configs(name)["min.insync.replicas"]["value"]) \
                    if "min-isr" in wanted else 0
                partitions = tuple(p for p in partitions if _kept(wanted, p, min_isr))
                if not partitions:
                    continue
                print(f"topic {name}  partitions {len(description.partitions)}"
                      + (f"  min.insync.replicas {min_isr}" if min_isr else ""))
            shown += len(partitions)
            rows = [("partition", "leader", "replicas", "isr", "log start", "high watermark", "log end")]
            rows += [(str(p.partition), _leader(p), _ids(p.replicas), _ids(p.isr), _offset(p.log_start_offset),
                      _offset(p.high_watermark), _offset(p.log_end_offset)) for p in partitions]
            print_table(rows)
            for p in partitions:
                if p.adding_replicas or p.removing_replicas:
                    print(f"  partition {p.partition} reassigning: adding {list(p.adding_replicas)}, "
                          f"removing {list(p.removing_replicas)}")
                if p.error:
                    print(f"  partition {p.partition}: {p.error}")
    if wanted is not None and not shown:
        print(f"no partitions {_PARTITION_FILTERS[wanted].split(' (')[0]}", file=sys.stderr)
    return 0


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _kept(wanted: str, p: PartitionDescription, min_isr: int) -> bool:
    """Whether ``wanted`` (a filter flag) lists ``p``, by kafka-topics.sh's rules."""
    if wanted == "--under-replicated-partitions":
        return len(p.isr) < len(p.replicas) - len(p.adding_replicas)   # replicas being added are not missing
    if wanted == "--unavailable-partitions":
        return not p.leader_alive
    if wanted == "--under-min-isr-partitions":
        return p.leader < 0 or len(p.isr) < min_isr
    return len(p.isr) == min_isr


def _offset(offset: int) -> str:
    return str(offset) if offset >= 0 else "-"   # -1: no live leader to ask


def _leader(p: PartitionDescription) -> str:
    if p.leader < 0:
        return "none"
    return str(p.leader) if p.leader_alive else f"{p.leader} (down)"


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(map(str, ids)) or "-"


def delete_topic(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        admin.delete_topic(args.topic)
    print(f"deleted topic {args.topic}")
    return 0


def alter_topic(args: argparse.Namespace) -> int:
    if not args.config and not args.delete_config and args.partitions is None:
        raise SystemExit("error: give --config NAME=VALUE, --delete-config NAME and/or --partitions N")
    with Admin(args.bootstrap, **client_options(args)) as admin:
        if args.config or args.delete_config:
            admin.alter_configs(args.topic, parse_configs(args.config), args.delete_config)
        if args.partitions is not None:
            admin.create_partitions(args.topic, args.partitions)
    print(f"altered topic {args.topic}" + (f" ({args.partitions} partitions)" if args.partitions is not None else ""))
    return 0


def delete_topic_records(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        try:
            (low,) = admin.delete_records({TopicPartition(args.topic, args.partition): args.offset}).values()
        except OffsetOutOfRange as exc:   # its own hint is a consumer's (seek, auto_offset_reset)
            raise SystemExit(f"error: OffsetOutOfRange: {args.topic}-{args.partition}: "
                             f"{str(exc).removesuffix(f' ({exc.hint})')}; give an --offset between the log start "
                             f"and the high watermark (`ember topics describe {args.topic}` shows both), or "
                             f"--offset -1 to delete every record up to the high watermark") from None
    print(f"{args.topic}-{args.partition}: records before offset {low} deleted (log start {low})")
    return 0


def elect_leaders(args: argparse.Namespace) -> int:
    """Prints every leadership move; exits 1 if a partition could not get its preferred leader
    (with --unclean: a partition without a live leader could not get one)."""
    if args.partition is not None and args.topic is None:
        raise SystemExit("error: --partition needs --topic")
    with Admin(args.bootstrap, **client_options(args)) as admin:
        if args.topic is None:
            partitions = None
        elif args.partition is None:
            layout = admin.describe_topic(args.topic, configs=False, offsets=False)
            partitions = [TopicPartition(args.topic, p.partition) for p in layout.partitions]
        else:
            partitions = [TopicPartition(args.topic, args.partition)]
        results = admin.elect_leaders(partitions, unclean=args.unclean)
    failed = 0
    for r in results:
        if r.moved:
            print(f"{r.topic}-{r.partition}: leader {r.previous_leader} -> {r.leader}")
        elif r.error is not None and not isinstance(r.error, ElectionNotNeeded):
            failed += 1
            print(f"{r.topic}-{r.partition}: not moved: {type(r.error).__name__}: {r.error}")
    unchanged = len(results) - failed - sum(r.moved for r in results)
    if unchanged:
        print(f"{unchanged} partition(s) already led by " + ("a live broker" if args.unclean else "their preferred replica"))
    return 1 if failed else 0


def reassign_partitions(args: argparse.Namespace) -> int:
    moves = _plan(args)
    with Admin(args.bootstrap, **client_options(args)) as admin:
        admin.reassign_partitions(moves)
    for tp, replicas in moves.items():
        print(f"reassigning {tp.topic}-{tp.partition} to replicas {replicas}; follow it with "
              f"`ember topics describe {tp.topic}`")
    return 0


def _plan(args: argparse.Namespace) -> dict[TopicPartition, list[int]]:
    """The moves of ``--plan FILE`` or of ``TOPIC --partition P --replicas IDS``."""
    if args.plan is not None:
        if args.topic or args.partition is not None or args.replicas:
            raise SystemExit("error: give either --plan or TOPIC --partition --replicas, not both")
        try:
            doc = json.loads(args.plan.read_text())
            return {TopicPartition(str(p["topic"]), int(p["partition"])): [int(b) for b in p["replicas"]]
                    for p in doc["partitions"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"error: {args.plan} is not a reassignment plan ({exc})") from None
    if args.topic is None or args.partition is None or not args.replicas:
        raise SystemExit("error: give TOPIC --partition P --replicas IDS, or --plan FILE")
    try:
        replicas = [int(b) for b in args.replicas.split(",")]
    except ValueError:
        raise SystemExit(f"error: --replicas expects broker ids like 2,3,1, got {args.replicas!r}") from None
    return {TopicPartition(args.topic, args.partition): replicas}
