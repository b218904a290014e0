"""``ember cluster up|down|status|start-broker|stop-broker``: a local cluster (real ZooKeeper + N
brokers) under a directory. ``up`` on a cluster with some brokers down starts only those."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from ember.errors import EmberError
from ember.launcher.cluster_sasl import ADMIN_USER, BROKER_USER, MECHANISM
from ember.launcher.cluster_tls import certificate_file_principal
from ember.launcher.local import DEFAULT_DATA, DEFAULT_PORT_BASE, STATE_FILE, LocalCluster, PortLayout, low_space_warning
from ember.launcher.prometheus_config import write_prometheus_config
from ember.launcher.zookeeper_server import is_healthy

#: The port base ``up`` used last for a data directory (kept by ``down``: the next ``up`` reuses it).
PORT_BASE_FILE = "port-base"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("cluster", help="run a local cluster: ZooKeeper + N brokers")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    up = actions.add_parser("up", help="start ZooKeeper and N brokers in the background")
    up.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    up.add_argument("--data", type=Path, default=Path(DEFAULT_DATA), help=f"data directory (default {DEFAULT_DATA})")
    up.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="broker config override, e.g. --config log.retention.ms=60000 (repeatable)")
    up.add_argument("--secure", action="store_true",
                    help="create a CA, broker and client certificates under DATA/tls and SCRAM users admin and "
                         "broker (DATA/sasl), serve every listener with SASL_SSL (client certificates required "
                         "too) and write the client configuration files")
    up.add_argument("--zookeeper-data", type=Path, metavar="DIR",
                    help="ZooKeeper's directory (default DATA/zookeeper); on another file system, a full data "
                         "directory cannot stop ZooKeeper")
    up.add_argument("--port-base", type=int, metavar="PORT",
                    help=f"fixed ports from PORT: broker N's ember listener on PORT+2(N-1), its Kafka listener on "
                         f"the next port; ZooKeeper, metrics and listeners all move by PORT-{DEFAULT_PORT_BASE} "
                         f"(default: what this data directory used last, else $EMBER_PORT_BASE, else "
                         f"{DEFAULT_PORT_BASE}: broker 1 on 127.0.0.1:9092, ZooKeeper on 2181; 0 picks free ports)")
    up.add_argument("--metrics", action="store_true",
                    help="serve Prometheus metrics and health checks on a loopback port per broker, and write "
                         "a Prometheus config for them into the data directory")
    up.set_defaults(func=cluster_up)

    for name, func, text in (("down", cluster_down, "stop the cluster's brokers and ZooKeeper; when no cluster "
                                                     "is running under DATA (e.g. it was stopped already), say "
                                                     "so and exit 0"),
                             ("status", cluster_status, "show whether ZooKeeper and each broker are up; exit 1 "
                                                        "unless all are up and ready (also when no cluster is "
                                                        "running under DATA)")):
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        action.add_argument("--data", type=Path, default=Path(DEFAULT_DATA), help="data directory of the cluster")
        action.set_defaults(func=func)

    for name, func, text in (("start-broker", start_broker, "start one broker of the cluster that is not running "
                                                             "(killed, crashed or stopped) on its port and data "
                                                             "directory, and wait until it answers; exit 0 when it "
                                                             "is up (also when it was already running), 1 otherwise"),
                             ("stop-broker", stop_broker, "stop one broker of the cluster (SIGTERM, SIGKILL after "
                                                          "--timeout); exit 0 when it is stopped (also when it was "
                                                          "not running), 1 otherwise")):
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        action.add_argument("broker_id", type=int, metavar="ID", help="the broker's id (`ember cluster status`)")
        action.add_argument("--data", type=Path, default=Path(DEFAULT_DATA), help="data directory of the cluster")
        action.add_argument("--timeout", type=float, default=60.0 if name == "start-broker" else 15.0,
                            metavar="SECONDS", help="how long to wait (default %(default)s)")
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
    if (args.data / STATE_FILE).exists():
        status = _status(args.data)
        if status["zookeeper"]["healthy"] or any(b["healthy"] for b in status["brokers"]):
            return _complete(args)
    base = _port_base(args)
    cluster = LocalCluster(args.data, broker_count=args.brokers, broker_config=_parse_overrides(args.config),
                           metrics=args.metrics, secure=args.secure, sasl=args.secure,
                           zookeeper_dir=args.zookeeper_data, ports=PortLayout(base) if base else None)
    warning = low_space_warning(args.data)
    if warning:
        print(warning)
    cluster.start(progress=print)   # stops what it started when it fails
    if base:
        try:
            (args.data / PORT_BASE_FILE).write_text(f"{base}\n")
        except OSError as exc:   # e.g. a full disk: the cluster runs; only the next `up` may pick other ports
            print(f"note: could not record the port base in {args.data / PORT_BASE_FILE} ({exc}); give "
                  f"--port-base {base} to the next `ember cluster up` to keep these addresses", file=sys.stderr)
    print(f"\nZooKeeper: {cluster.zk_connect}\nbootstrap: {cluster.bootstrap}"
          f"\nKafka bootstrap (any Kafka client): {cluster.kafka_bootstrap}")
    if args.metrics:
        print_metrics(cluster)
    if cluster.tls is not None:
        print_client_configs(cluster)
        return 0
    found = "" if args.data.resolve() == Path(DEFAULT_DATA).resolve() else f"export EMBER_DATA={args.data}\n      "
    print(f"try:  {found}ember topics create demo --partitions 3\n(client commands find this cluster's "
          f"brokers from {args.data / STATE_FILE}; other clients: --bootstrap {cluster.bootstrap})")
    return 0


def _port_base(args: argparse.Namespace) -> int:
    """The cluster's port base: ``--port-base``, else the one this data directory used last (so a
    cluster keeps its addresses across ``down`` and ``up``), else $EMBER_PORT_BASE, else 9092; 0:
    free ports picked at random (the tests' setting)."""
    if args.port_base is not None:
        return int(args.port_base)
    remembered = args.data / PORT_BASE_FILE
    if remembered.is_file() and remembered.read_text().strip().isdigit():
        return int(remembered.read_text())
    from_env = os.environ.get("EMBER_PORT_BASE", "")
    if from_env and not from_env.isdigit():
        raise SystemExit(f"error: EMBER_PORT_BASE={from_env!r}: expected a port number (0: free ports)")
    return int(from_env) if from_env else DEFAULT_PORT_BASE


def _complete(args: argparse.Namespace) -> int:
    """``up`` on a running cluster (its ZooKeeper or a broker answers): start only its brokers that
    are down (their ports, data and settings as recorded); the options of a new cluster do not apply."""
    cluster = LocalCluster.load(args.data)
    missing = [broker_id for broker_id in cluster.brokers if not cluster.broker_running(broker_id)]
    silent = [broker_id for broker_id in cluster.brokers
              if broker_id not in missing and not cluster.broker_answers(broker_id)]
    for broker_id in silent:
        broker = cluster.brokers[broker_id]
        print(f"error: broker {broker_id} (pid {broker.pid}) is running but does not answer on {broker.address} "
              f"(starting, paused or hung; see {broker.log_path}); `ember cluster stop-broker {broker_id} "
              f"--data {args.data}`, then `ember cluster start-broker {broker_id} --data {args.data}`",
              file=sys.stderr)
    if not missing and not silent:
        print(f"a cluster is already running under {args.data}, every broker up "
              f"(bootstrap {cluster.bootstrap}); `ember cluster down --data {args.data}` to stop it")
        return 1
    ignored = [option for option, given in (("--brokers", args.brokers != len(cluster.brokers)),
                                            ("--config", bool(args.config)), ("--secure", args.secure),
                                            ("--metrics", args.metrics and not cluster.metrics),
                                            ("--zookeeper-data", args.zookeeper_data is not None)) if given]
    if ignored:
        print(f"note: {', '.join(ignored)} ignored: the cluster under {args.data} exists "
              f"({len(cluster.brokers)} brokers); `ember cluster down --data {args.data}` first to start a new one")
    if not _zookeeper_up(cluster):
        return 1
    if missing:
        print(f"a cluster is running under {args.data} with broker(s) {', '.join(map(str, missing))} down; "
              f"starting only those")
    if _start_brokers(cluster, missing, 60.0, args.data) or silent:
        return 1
    print(f"\nZooKeeper: {cluster.zk_connect}\nbootstrap: {cluster.bootstrap}"
          f"\nKafka bootstrap (any Kafka client): {cluster.kafka_bootstrap}")
    return 0


def _zookeeper_up(cluster: LocalCluster) -> bool:
    """Whether the cluster's ZooKeeper answers; says what to do when it does not."""
    zk = cluster.zookeeper
    if zk is not None and is_healthy(zk.host, zk.port, zk.client_context()):
        return True
    print(f"error: the cluster's ZooKeeper ({zk.connect_string if zk else 'none recorded'}) is down, so no broker "
          f"can start; restart the whole cluster: `ember cluster down --data {cluster.data_dir}`, then "
          f"`ember cluster up --data {cluster.data_dir}`", file=sys.stderr)
    return False


def _start_brokers(cluster: LocalCluster, broker_ids: list[int], timeout_s: float, data: Path) -> list[int]:
    """Start each broker and wait for it (``timeout_s`` each); the ids that failed, each said why."""
    failed = []
    for broker_id in broker_ids:
        try:
            cluster.start_broker(broker_id, timeout_s, progress=print)
        except EmberError as exc:
            print(f"error: broker {broker_id}: {exc}", file=sys.stderr)
            failed.append(broker_id)
    if failed:
        print(f"broker(s) {', '.join(map(str, failed))} not up; see `ember cluster status --data {data}` and the "
              f"logs {', '.join(str(cluster.brokers[i].log_path) for i in failed)}", file=sys.stderr)
    return failed


def _one_broker(args: argparse.Namespace) -> LocalCluster | None:
    """The cluster under ``--data`` when it has broker ``ID``; None after saying why not."""
    if not (args.data / STATE_FILE).exists():
        print(_no_cluster(args.data) + f"; start one with `ember cluster up --data {args.data}`", file=sys.stderr)
        return None
    cluster = LocalCluster.load(args.data)
    if args.broker_id not in cluster.brokers:
        print(f"error: the cluster under {args.data} has no broker {args.broker_id} (its brokers: "
              f"{', '.join(map(str, sorted(cluster.brokers)))})", file=sys.stderr)
        return None
    return cluster


def start_broker(args: argparse.Namespace) -> int:
    cluster = _one_broker(args)
    if cluster is None:
        return 1
    broker = cluster.brokers[args.broker_id]
    if cluster.broker_running(args.broker_id):
        if cluster.broker_answers(args.broker_id):
            print(f"broker {args.broker_id} is running already on {broker.address} (pid {broker.pid})")
            return 0
        print(f"error: broker {args.broker_id} (pid {broker.pid}) is running but does not answer on "
              f"{broker.address} (starting, paused or hung; see {broker.log_path}); "
              f"`ember cluster stop-broker {args.broker_id} --data {args.data}` first", file=sys.stderr)
        return 1
    if not _zookeeper_up(cluster):
        return 1
    return 1 if _start_brokers(cluster, [args.broker_id], args.timeout, args.data) else 0


def stop_broker(args: argparse.Namespace) -> int:
    cluster = _one_broker(args)
    if cluster is None:
        return 1
    try:
        stopped = cluster.stop_broker(args.broker_id, args.timeout, progress=print)
    except (EmberError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"error: could not stop broker {args.broker_id}: {exc}", file=sys.stderr)
        return 1
    if not stopped:
        print(f"broker {args.broker_id} is not running; nothing to stop")
    else:
        print(f"start it again with `ember cluster start-broker {args.broker_id} --data {args.data}`")
    return 0


def print_client_configs(cluster: LocalCluster) -> None:
    """Where a client of the TLS cluster finds its settings, and how each kind of client uses them."""
    assert cluster.tls is not None
    files = cluster.tls.write_client_configs(cluster.bootstrap, cluster.kafka_bootstrap, cluster.scram)
    if cluster.scram:
        security = (f"SASL_SSL: SCRAM ({MECHANISM}) as user {ADMIN_USER}, whose password is in the files below "
                    f"(owner-only); brokers log in to each other as User:{BROKER_USER}\n"
                    f"ACLs on: User:{ADMIN_USER} and User:{BROKER_USER} are super users; grant other principals "
                    f"with `ember acls add`\n")
    else:
        security = (f"ACLs on: this client certificate ({certificate_file_principal(cluster.tls.client.cert)}) and the "
                    f"brokers are super users; grant other principals with `ember acls add`\n")
    java = re.sub(r'password="(?:[^"\\]|\\.)*"', 'password="[hidden: see the file]"', files["java"].read_text())
    print(f"TLS on every listener, client certificates required (CA: {cluster.tls.ca})\n{security}"
          f"client configuration:\n"
          f"  ember clients (Python):  {files['ember']}\n"
          f"      Producer(**json.load(open('{files['ember']}')))\n"
          f"  ember CLI, Kafka's Java tools (--command-config, --producer.config, --consumer.config):  {files['java']}\n"
          f"  librdkafka / confluent-kafka:  {files['librdkafka']}\n"
          f"---\n{java}---\n"
          f"try:  export EMBER_BOOTSTRAP={cluster.bootstrap} EMBER_CLIENT_CONFIG={files['java']}\n"
          f"      ember topics create demo --partitions 3")


def print_metrics(cluster: LocalCluster) -> None:
    """The endpoints, and a Prometheus config for them written next to the cluster's data."""
    print("metrics:")
    for broker_id, address in sorted(cluster.metrics_addresses.items()):
        print(f"  broker {broker_id}  http://{address}/metrics   health: http://{address}/readyz, /livez")
    config = write_prometheus_config(cluster.data_dir, cluster.metrics_addresses)
    print(f"Prometheus scrape config (alert rules included): {config}\n"
          f"  prometheus --config.file={config} --storage.tsdb.path={cluster.data_dir / 'prometheus'}\n"
          f"---\n{config.read_text()}---\n"
          f"terminal view without Prometheus:  ember top --data {cluster.data_dir}")


def cluster_down(args: argparse.Namespace) -> int:
    """Stop every process of the cluster; writes nothing, so it works on a full disk. Without a
    cluster under ``--data`` (stopped already, or never started there) there is nothing to do:
    exit 0, as stopping what is stopped succeeds."""
    if not (args.data / STATE_FILE).exists():
        print(_no_cluster(args.data) + ": nothing to stop")
        return 0
    cluster = LocalCluster.load(args.data)
    cluster.stop(progress=print)
    print(f"stopped the cluster under {args.data}")
    return 0


def _status(data: Path) -> dict[str, Any]:
    """``LocalCluster.status()`` of the cluster under ``data``: plain dicts and lists, read by key."""
    return LocalCluster.load(data).status()


def _no_cluster(data: Path) -> str:
    return f"no cluster is running under {data} (no {STATE_FILE} there)"


def cluster_status(args: argparse.Namespace) -> int:
    if not (args.data / STATE_FILE).exists():
        print(_no_cluster(args.data) + f"; start one with `ember cluster up --data {args.data}`")
        return 1
    status = _status(args.data)
    zk = status["zookeeper"]
    print(f"zookeeper  {zk['address']:<22} {'up' if zk['healthy'] else 'DOWN'}")
    for broker in status["brokers"]:
        readiness = broker["readiness"]
        ready = "" if readiness is None else "  ready" if readiness.ready else \
            f"  NOT READY: {'; '.join(readiness.reasons)}"
        print(f"broker {broker['id']:<3} {broker['address']:<22} {'up' if broker['healthy'] else 'DOWN'}"
              f"  pid {broker['pid'] or '-'}  Kafka {broker['kafka_address'] or '-'}{ready}")
    print(f"disk       {status['disk']['text']}")
    bootstrap = ",".join(b["address"] for b in status["brokers"] if b["healthy"])
    print(f"bootstrap: {bootstrap or '(no broker up)'}")
    kafka = ",".join(b["kafka_address"] for b in status["brokers"] if b["healthy"] and b["kafka_address"])
    print(f"Kafka bootstrap: {kafka or '(no broker up)'}")
    healthy = zk["healthy"] and all(b["healthy"] and (b["readiness"] is None or b["readiness"].ready)
                                    for b in status["brokers"])
    return 0 if healthy else 1
