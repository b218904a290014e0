"""The ``ember`` command line.

Each module in ``ember.commands`` contributes one top-level command through
``register(subparsers)``; the parser sets ``func`` to the handler, which returns an exit code.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import pkgutil
import sys

import ember.commands
from ember.commands.topics import no_cluster_hint
from ember.errors import BrokerNotAvailable, EmberError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ember", description="ember: a Spark-native streaming platform")
    parser.add_argument("--version", action="version", version=f"ember {_version()}",
                        help="print ember's version and exit")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in sorted(pkgutil.iter_modules(ember.commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"ember.commands.{module.name}").register(subparsers)
    return parser


def _version() -> str:
    """The installed package's version (its metadata), "unknown" when ember runs uninstalled."""
    try:
        return importlib.metadata.version("ember")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except EmberError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        for note in getattr(exc, "__notes__", ()):
            print(f"  {note}", file=sys.stderr)
        hint = no_cluster_hint(args.bootstrap) if isinstance(exc, BrokerNotAvailable) and \
            isinstance(getattr(args, "bootstrap", None), str) else None
        if hint:   # e.g. a client command before `ember cluster up`
            print(f"  {hint}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a malformed argument value (address, number, config), caught late
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
