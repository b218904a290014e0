"""The ``ember`` command line.

Each module in ``ember.commands`` contributes one top-level command through
``register(subparsers)``; the parser sets ``func`` to the handler, which returns an exit code.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import ember.commands
from ember.errors import BrokerNotAvailable, EmberError, SslAuthenticationFailed


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command`` (the first argument) naming one of the commands,
    only that one is registered, so ``ember broker start`` does not import what the other commands
    need (the clients, the launcher's TLS, SASL and Prometheus modules: megabytes a broker would hold)."""
    parser = argparse.ArgumentParser(prog="ember", description="ember: a Spark-native streaming platform")
    parser.add_argument("--version", action=_VersionAction, help="print ember's version and exit")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    names = sorted(module.name for module in pkgutil.iter_modules(ember.commands.__path__))
    for name in [command] if command in names else names:
        importlib.import_module(f"ember.commands.{name}").register(subparsers)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command a command line names (its first argument), None when it starts with an option."""
    return argv[0] if argv and not argv[0].startswith("-") else None


class _VersionAction(argparse.Action):
    """argparse's ``version`` action, with the version read only when asked for: reading it
    imports importlib.metadata (and the email package, ~2.5 MB), which a broker never needs."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"ember {_version()}")
        parser.exit()


def _version() -> str:
    """The installed package's version (its metadata), "unknown" when ember runs uninstalled."""
    import importlib.metadata  # here, not at start-up: see _VersionAction

    try:
        return importlib.metadata.version("ember")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


#: Packages a broker never uses that pyarrow (numpy) and kio (hypothesis, to register its test
#: strategies) import at start-up whenever they are installed: 21 MB of every broker's RSS.
NOT_IN_A_BROKER = ("numpy", "hypothesis")


def _leave_out_of_the_broker() -> None:
    """Make ``import numpy`` and ``import hypothesis`` fail in this process (a None entry in
    ``sys.modules``), as in an install without them; pyarrow and kio then go without."""
    for name in NOT_IN_A_BROKER:
        sys.modules.setdefault(name, None)   # type: ignore[arg-type]  # None blocks the import (the import system's rule)


def main(argv: list[str] | None = None) -> int:
    if argv is None and _command(sys.argv[1:]) == "broker":      # a broker process, not a call from Python
        _leave_out_of_the_broker()
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_command(argv)).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except EmberError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        for note in getattr(exc, "__notes__", ()):
            print(f"  {note}", file=sys.stderr)
        hint = None
        if isinstance(exc, BrokerNotAvailable) and isinstance(getattr(args, "bootstrap", None), str):
            from ember.commands.topics import no_cluster_hint

            hint = no_cluster_hint(args.bootstrap)
        if isinstance(exc, SslAuthenticationFailed) and hasattr(args, "command_config"):
            from ember.commands.topics import secure_cluster_hint

            hint = secure_cluster_hint(args.command_config)
        if hint:   # e.g. a client command before `ember cluster up`, or without a secure cluster's settings
            print(f"  {hint}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a malformed argument value (address, number, config), caught late
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
