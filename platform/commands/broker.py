"""``ember broker start``: run one broker process in the foreground until SIGTERM."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ember.errors import InvalidConfig
from ember.ingest.broker_config import BROKER_CONFIGS, BrokerConfig, parse_log_dirs
from ember.ingest.listeners import ListenerConfig
from ember.wire.config_def import read_properties

log = logging.getLogger(__name__)
#: The soft open-file limit a broker asks for when the hard one is unlimited (Linux's default
#: fs.nr_open; a soft limit must be a number).
OPEN_FILES_WITHOUT_HARD_LIMIT = 1 << 20

if TYPE_CHECKING:
    from ember.server.broker import Broker, BrokerOptions

#: How long a stopped broker waits for worker threads before it exits anyway.
EXECUTOR_SHUTDOWN_S = 3.0
LOG_FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = subparsers.add_parser("broker", help="run a broker")
    actions = broker.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = actions.add_parser("start", help="run a broker in the foreground until SIGTERM")
    start.add_argument("--id", type=int, required=True, help="broker id, unique in the cluster")
    start.add_argument("--zookeeper", required=True, metavar="HOST:PORT", help="ZooKeeper connect string")
    start.add_argument("--listen", metavar="HOST:PORT",
                       help="address of the EMBER listener (ember's clients and follower fetches)")
    start.add_argument("--listeners", metavar="NAME://HOST:PORT,...",
                       help="Kafka's listeners property, e.g. KAFKA://127.0.0.1:9093 (any name but EMBER and "
                            "inter.broker.listener.name speaks Kafka's protocol); overrides the --config file's")
    start.add_argument("--advertised-listeners", metavar="NAME://HOST:PORT,...",
                       help="Kafka's advertised.listeners: what clients are told (default: the listeners)")
    start.add_argument("--data", required=True, type=Path, metavar="DIR", help="data directory of this broker")
    start.add_argument("--log-dirs", metavar="DIR,DIR...",
                       help="Kafka's log.dirs: the log directories, one per disk (overrides the --config file's; "
                            "default: the --data directory)")
    start.add_argument("--config", type=Path, metavar="FILE",
                       help="broker properties (Kafka names; see conf/broker.properties)")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="a broker property over the --config file's, as kafka-server-start's --override "
                            "(repeatable)")
    start.add_argument("--metrics-listen", metavar="HOST:PORT",
                       help="serve /metrics, /livez and /readyz here (overrides metrics.listen; off by default)")
    start.set_defaults(func=start_broker)


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidConfig(f"--listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:9092")
    return host, int(port)


def setup_logging(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr),
                                       logging.FileHandler(data_dir / "broker.log")]
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, handlers=handlers, force=True)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    # broker.log sits on the log disk: when that fills, a line that cannot be written is dropped
    # instead of printing a 30-line "--- Logging error ---" traceback per line (on the same disk)
    logging.raiseExceptions = False


def start_broker(args: argparse.Namespace) -> int:
    if args.config is not None and not args.config.is_file():
        raise InvalidConfig(f"--config {args.config}: no such file")
    properties = read_properties(args.config) if args.config is not None else {}
    for pair in args.override:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidConfig(f"--override {pair!r}: expected KEY=VALUE, e.g. --override log.retention.ms=60000")
        properties[key.strip()] = value.strip()
    config = BrokerConfig.from_properties(properties)
    listeners = ListenerConfig.resolve(parse_listen(args.listen) if args.listen else None,
                                       args.listeners or config.listeners,
                                       args.advertised_listeners or config.advertised_listeners,
                                       config.listener_security_protocol_map, config.inter_broker_listener_name)
    setup_logging(args.data)
    raise_open_file_limit()
    metrics_listen = BROKER_CONFIGS["metrics.listen"].parse(args.metrics_listen) if args.metrics_listen \
        else config.metrics_listen
    log_dirs = parse_log_dirs(args.log_dirs, "--log-dirs") if args.log_dirs else config.log_dir_paths()
    broker_class, options_class = _import_broker()
    options = options_class(args.id, args.zookeeper, listeners, args.data.resolve(), config, metrics_listen, log_dirs)
    run_until_stopped(broker_class(options))
    return 0


def raise_open_file_limit() -> None:
    """Raise this process's soft limit on open files to the hard limit, as the JVM does for Kafka:
    a broker holds a file per partition replica (its active segment) and one per connection, and
    the usual soft limit (1,024) is too low for a broker of a few thousand partitions
    (docs/operations.md, "Open files")."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = OPEN_FILES_WITHOUT_HARD_LIMIT if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the open-file limit from %d to %d (%s)", soft, target, exc)


def _import_broker() -> tuple[type[Broker], type[BrokerOptions]]:
    """ember.server.broker, imported when a broker starts (not when the command line is built),
    without hypothesis: kio, the Kafka listener's codecs, imports ``hypothesis.strategies`` when it
    is installed (a test dependency) to register a strategy per Kafka type, ~10 MB of modules
    (hypothesis, unittest, sortedcontainers, zoneinfo...) a broker never uses. A ``None`` in
    ``sys.modules`` makes that import fail, which kio expects (it skips the strategies); the entry
    is removed again, so the process could still import hypothesis later."""
    hide = "hypothesis" not in sys.modules and "kio" not in sys.modules
    if hide:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]
    try:
        from ember.server.broker import Broker, BrokerOptions
    finally:
        if hide:
            del sys.modules["hypothesis"]
    return Broker, BrokerOptions


def run_until_stopped(broker: Broker) -> None:
    """Serve until SIGTERM/SIGINT, shut down, and exit in bounded time.

    ``asyncio.run`` would wait without limit for worker threads still blocked in a ZooKeeper call
    (ZooKeeper down), and so would the interpreter's exit. Once the broker has stopped (logs
    flushed, checkpoints written) nothing they do matters: give them a moment, then leave."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(broker.run())
        loop.run_until_complete(_shutdown_executor(loop))
    finally:
        loop.close()
    stuck = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if stuck:
        logging.getLogger(__name__).warning("exiting with threads still blocked: %s", ", ".join(stuck))
        logging.shutdown()
        os._exit(0)


async def _shutdown_executor(loop: asyncio.AbstractEventLoop) -> None:
    try:
        await asyncio.wait_for(loop.shutdown_default_executor(), EXECUTOR_SHUTDOWN_S)
    except asyncio.TimeoutError:
        pass
