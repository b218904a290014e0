"""``ember cluster up|down|status``: a local cluster (real ZooKeeper + N brokers) under a directory."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ember.cluster.local import LocalCluster, STATE_FILE
from ember.errors import EmberError

DEFAULT_DATA = os.environ.get("EMBER_DATA", "data/cluster")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cluster", help="run a local cluster: ZooKeeper + N brokers")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    up = actions.add_parser("up", help="start ZooKeeper and N brokers in the background")
    up.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    up.add_argument("--data", type=Path, default=Path(DEFAULT_DATA), help=f"data directory (default {DEFAULT_DATA})")
    up.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="broker config override, e.g. --config log.retention.ms=60000 (repeatable)")
    up.set_defaults(func=cluster_up)

    for name, func, text in (("down", cluster_down, "stop the cluster's brokers and ZooKeeper"),
                             ("status", cluster_status, "show whether ZooKeeper and each broker are up")):
        action = actions.add_parser(name, help=text)
        action.add_argument("--data", type=Path, default=Path(DEFAULT_DATA), help="data directory of the cluster")
        action.set_defaults(func=func)


def _parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --config expects KEY=VALUE, got {pair!r}")
        overrides[key.strip()] = value.strip()
    return overrides


def cluster_up(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise SystemExit("error: --brokers must be at least 1")
    if (args.data / STATE_FILE).exists() and any(
            b["healthy"] for b in LocalCluster.load(args.data).status()["brokers"]):
        print(f"a cluster is already running under {args.data}; `ember cluster down --data {args.data}` first")
        return 1
    cluster = LocalCluster(args.data, broker_count=args.brokers, broker_config=_parse_overrides(args.config))
    try:
        cluster.start(progress=print)
    except EmberError:
        cluster.stop()
        raise
    print(f"\nZooKeeper: {cluster.zk_connect}\nbootstrap: {cluster.bootstrap}"
          f"\nKafka bootstrap (any Kafka client): {cluster.kafka_bootstrap}")
    print(f"try:  export EMBER_BOOTSTRAP={cluster.bootstrap}\n      ember topics create demo --partitions 3")
    return 0


def cluster_down(args: argparse.Namespace) -> int:
    cluster = LocalCluster.load(args.data)
    cluster.stop()
    print(f"stopped the cluster under {args.data}")
    return 0


def cluster_status(args: argparse.Namespace) -> int:
    status = LocalCluster.load(args.data).status()
    zk = status["zookeeper"]
    print(f"zookeeper  {zk['address']:<22} {'up' if zk['healthy'] else 'DOWN'}")
    for broker in status["brokers"]:
        print(f"broker {broker['id']:<3} {broker['address']:<22} {'up' if broker['healthy'] else 'DOWN'}"
              f"  pid {broker['pid'] or '-'}  Kafka {broker['kafka_address'] or '-'}")
    bootstrap = ",".join(b["address"] for b in status["brokers"] if b["healthy"])
    print(f"bootstrap: {bootstrap or '(no broker up)'}")
    kafka = ",".join(b["kafka_address"] for b in status["brokers"] if b["healthy"] and b["kafka_address"])
    print(f"Kafka bootstrap: {kafka or '(no broker up)'}")
    healthy = zk["healthy"] and all(b["healthy"] for b in status["brokers"])
    return 0 if healthy else 1
