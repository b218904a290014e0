"""``ember top``: per-broker and per-topic rates and group lag in the terminal, refreshing, from
the brokers' metrics endpoints (for clusters nobody points Prometheus at)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ember.launcher.local import DEFAULT_DATA, LocalCluster
from ember.launcher.top import Scrape, render

CLEAR = "\x1b[H\x1b[2J"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    top = subparsers.add_parser("top", help="live per-broker and per-topic rates and consumer lag")
    top.add_argument("--data", type=Path, default=Path(DEFAULT_DATA),
                     help=f"data directory of a cluster started with `ember cluster up --metrics` (default {DEFAULT_DATA})")
    top.add_argument("--metrics", metavar="HOST:PORT[,...]",
                     help="metrics endpoints to read instead of the cluster under --data")
    top.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    top.add_argument("--iterations", type=int, help="stop after this many refreshes (default: until Ctrl-C)")
    top.set_defaults(func=run_top)


def endpoints(args: argparse.Namespace) -> list[str]:
    if args.metrics:
        return [address.strip() for address in args.metrics.split(",") if address.strip()]
    addresses = LocalCluster.load(args.data).metrics_addresses
    if not addresses:
        raise SystemExit(f"error: the cluster under {args.data} serves no metrics; start it with "
                         f"`ember cluster up --metrics` or pass --metrics HOST:PORT")
    return [address for _, address in sorted(addresses.items())]


def run_top(args: argparse.Namespace) -> int:
    if args.interval <= 0 or (args.iterations is not None and args.iterations < 1):
        raise SystemExit("error: --interval must be positive and --iterations at least 1")
    addresses = endpoints(args)
    timeout_s = min(5.0, max(1.0, args.interval))
    clear = CLEAR if sys.stdout.isatty() else ""
    before = Scrape.take(addresses, timeout_s)
    refreshes = 0
    while args.iterations is None or refreshes < args.iterations:
        time.sleep(args.interval)
        now = Scrape.take(addresses, timeout_s)
        print(clear + render(before, now), flush=True)
        before, refreshes = now, refreshes + 1
    return 0
