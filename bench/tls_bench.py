"""What TLS (and TLS + SCRAM) costs: producer and consumer throughput over TLS as a ratio to
plaintext, for ember and for Apache Kafka measured the same way.

ember: three local clusters side by side, one plaintext, one ``secure`` (every listener on TLS
with client certificates, replication and ZooKeeper over TLS too) and one ``secure`` with SASL
(every listener SASL_SSL with SCRAM-SHA-512, what ``ember cluster up --secure`` starts; SCRAM
costs one exchange per connection, so it should cost what TLS costs). Kafka (``--kafka``): one 3-node
KRaft cluster (``bench/vs_kafka``; its jars must be set up: ``bash bench/vs_kafka/setup.sh``) with a
PLAINTEXT, an SSL and a SASL_SSL (SCRAM-SHA-512, user created by ``kafka-storage format --add-scram``)
listener, the same PEM certificates, client certificates required; its brokers replicate over
PLAINTEXT, so Kafka's acks=all figures cover only the client's hop.

Cases: end-to-end latency p50/p99/p99.9 at ``--latency-rate`` records/s (acks=all RF=3, the send time
in each value, 100 B values, a consumer in its own process; ``bench/vs_kafka``'s latency case), producer
records/s (``--records`` values of ``--value-size`` bytes, acks=1 RF=1 and acks=all
RF=3; ember ``Producer.send``, Kafka confluent-kafka ``produce``) and consumer records/s from the
beginning of an RF=1 topic of ``--consume-records`` (ember ``poll_batches``, Kafka ``consume``). Plaintext and TLS runs
alternate and the best of ``--repeats`` counts, as in ``bench/vs_kafka``. Writes ``--out``/tls_scram.md
(``bench/results/tls.md`` holds the earlier TLS-only run).

    .venv/bin/python bench/tls_bench.py [--records 200000] [--value-size 512] [--kafka]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "vs_kafka"), str(HERE)]

from systems import EmberSystem, KafkaClients, KafkaSystem, ProduceSettings  # noqa: E402
from workloads import PARTITIONS, best_time, latency_percentiles, latency_run, log  # noqa: E402

from ember.launcher.cluster_sasl import ClusterSasl  # noqa: E402
from ember.launcher.cluster_tls import ClusterTls  # noqa: E402


@dataclass
class Variant:
    """One way to reach a system: plaintext or TLS, its clients and the system that owns topics."""
    system: str
    security: str
    owner: Any
    clients: Any

    @property
    def key(self) -> str:
        """The security label as a topic-name part."""
        return self.security.replace("+", "-")

    @property
    def produce_mode(self) -> str:
        return self.clients.produce_modes[0]

    @property
    def consume_mode(self) -> str:
        return self.clients.consume_modes[0]


def produce_rate(variant: Variant, settings: ProduceSettings, value: bytes, records: int, topic: str) -> float:
    variant.owner.create_topic(topic, PARTITIONS, settings.replication_factor)
    with variant.clients.produce_job(variant.produce_mode, topic, settings, value, records) as job:
        return records / best_time(job)


def consume_rate(variant: Variant, topic: str, records: int) -> float:
    with variant.clients.consume_job(variant.consume_mode, topic, PARTITIONS, records) as job:
        return records / best_time(job)


Row = tuple[str, dict[str, float]]


def measure(variants: tuple[Variant, ...], args: argparse.Namespace) -> list[Row]:
    """(case, {security: records/s}) for one system's variants."""
    value = os.urandom(args.value_size)
    rows = []
    for settings in (ProduceSettings("1", 1), ProduceSettings("all", 3)):
        for variant in variants:   # warm-up: connections, JIT, caches
            produce_rate(variant, settings, value, max(1, args.records // 5), f"warm-{settings.acks}-{variant.key}")
        best = {v.security: 0.0 for v in variants}
        for run in range(args.repeats):
            for variant in variants if run % 2 == 0 else reversed(variants):
                rate = produce_rate(variant, settings, value, args.records, f"p-{settings.acks}-{variant.key}-{run}")
                log(f"{variant.system} produce {settings.label} {variant.security:9s} {rate:>10,.0f} records/s")
                best[variant.security] = max(best[variant.security], rate)
        rows.append((f"produce {settings.label}", best))
    best = {v.security: 0.0 for v in variants}
    for variant in variants:
        produce_rate(variant, ProduceSettings("1", 1), value, args.consume_records, f"read-{variant.key}")
    for run in range(args.repeats):
        for variant in variants if run % 2 == 0 else reversed(variants):
            rate = consume_rate(variant, f"read-{variant.key}", args.consume_records)
            log(f"{variant.system} consume {variant.security:9s} {rate:>10,.0f} records/s")
            best[variant.security] = max(best[variant.security], rate)
    rows.append(("consume from the beginning, RF=1", best))
    return rows


#: p50, p99, p99.9 (ms) per security variant
Latencies = dict[str, list[float]]


def measure_latency(variants: tuple[Variant, ...], args: argparse.Namespace) -> Latencies:
    """End-to-end latency (send time in the value → consumer in its own process) at a fixed rate,
    acks=all RF=3, for each variant; the run with the best p99 of ``--repeats`` counts."""
    best: Latencies = {}
    for run in range(args.repeats):
        for variant in variants if run % 2 == 0 else reversed(variants):
            figures = latency_percentiles(latency_run(variant.owner, variant.clients, f"lat-{variant.key}-{run}",
                                                      args.latency_rate, args.latency_seconds))
            log(f"{variant.system} latency {variant.security:9s} p50 {figures[0]:.2f} ms  p99 {figures[1]:.2f} ms  "
                f"p99.9 {figures[2]:.2f} ms")
            if variant.security not in best or figures[1] < best[variant.security][1]:
                best[variant.security] = figures
    return best


def report(results: dict[str, list[Row]], args: argparse.Namespace,
           latencies: dict[str, Latencies] | None = None) -> str:
    lines = [f"# TLS vs plaintext: throughput and latency ({args.value_size} B values, {args.records:,} records per producer "
             f"run, {args.consume_records:,} per consumer run, best of {args.repeats})", "",
             f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores "
             f"with `bench/tls_bench.py`; the variants of a system ran side by side, alternating.", "",
             "ember's TLS cluster encrypts client connections, replication and ZooKeeper; its TLS+SCRAM "
             "cluster also authenticates every connection (clients and brokers) with SCRAM-SHA-512. Kafka's "
             "TLS and SASL_SSL (SCRAM-SHA-512) listeners cover the client's connection only (its brokers "
             "replicate over PLAINTEXT).", "",
             "| system | case | plaintext records/s | TLS records/s | TLS / plaintext | TLS+SCRAM records/s "
             "| TLS+SCRAM / plaintext |", "|---|---|---:|---:|---:|---:|---:|"]
    for system, rows in results.items():
        for case, rates in rows:
            plain, tls, scram = rates["plaintext"], rates["TLS"], rates.get("TLS+SCRAM")
            scram_cells = f"{scram:,.0f} | {scram / plain:.2f}" if scram is not None else "— | —"
            lines.append(f"| {system} | {case} | {plain:,.0f} | {tls:,.0f} | {tls / plain:.2f} | {scram_cells} |")
    if latencies:
        lines += ["", f"End-to-end latency at {args.latency_rate:,} records/s of 100 B values for "
                  f"{args.latency_seconds:.0f} s (acks=all, "
                  f"RF=3, {PARTITIONS} partitions; the first second not counted; the run with the best p99 of "
                  f"{args.repeats}); the ratio is TLS (or TLS+SCRAM) latency / plaintext latency, lower is better:", "",
                  "| system | percentile | plaintext ms | TLS ms | TLS / plaintext | TLS+SCRAM ms | TLS+SCRAM / plaintext |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for system, best in latencies.items():
            for i, name in enumerate(("p50", "p99", "p99.9")):
                plain, tls = best["plaintext"][i], best["TLS"][i]
                scram = best["TLS+SCRAM"][i] if "TLS+SCRAM" in best else None
                scram_cells = f"{scram:.2f} | {scram / plain:.2f}" if scram is not None else "— | —"
                lines.append(f"| {system} | {name} | {plain:.2f} | {tls:.2f} | {tls / plain:.2f} | {scram_cells} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000, help="records per run (default 200k)")
    parser.add_argument("--consume-records", type=int, default=1_000_000,
                        help="records per consumer run (default 1M)")
    parser.add_argument("--value-size", type=int, default=512, help="bytes per value (default 512)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant; the best counts (default 3)")
    parser.add_argument("--latency-rate", type=int, default=20_000,
                        help="records/s of the end-to-end latency case (default 20k, as bench/vs_kafka; 0 skips it)")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="seconds per latency run (default 10)")
    parser.add_argument("--kafka", action="store_true", help="measure Apache Kafka too (bench/vs_kafka's jars)")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="where tls_scram.md goes")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ember-tls-bench-"))
    results: dict[str, list[Row]] = {}
    latencies: dict[str, Latencies] = {}
    started: list[Any] = []
    try:
        plain = EmberSystem(root / "ember-plain")
        started.append(plain)
        secure = EmberSystem(root / "ember-tls", secure=True)
        started.append(secure)
        scram = EmberSystem(root / "ember-scram", secure=True, sasl=True)
        started.append(scram)
        variants = (Variant("ember", "plaintext", plain, plain.clients), Variant("ember", "TLS", secure, secure.clients),
                    Variant("ember", "TLS+SCRAM", scram, scram.clients))
        results["ember"] = measure(variants, args)
        if args.latency_rate:
            latencies["ember"] = measure_latency(variants, args)
        for system in reversed(started):
            system.stop()
        started.clear()
        if args.kafka:
            kafka = KafkaSystem(root / "kafka", tls=ClusterTls.create(root / "kafka-tls"),
                                sasl=ClusterSasl.create(root / "kafka-sasl"))
            started.append(kafka)
            cluster = kafka.cluster
            tls_clients = KafkaClients(cluster.ssl_bootstrap, config=tuple(cluster.ssl_client_config.items()))
            scram_clients = KafkaClients(cluster.sasl_bootstrap, config=tuple(cluster.sasl_client_config.items()))
            variants = (Variant("Kafka", "plaintext", kafka, kafka.clients), Variant("Kafka", "TLS", kafka, tls_clients),
                        Variant("Kafka", "TLS+SCRAM", kafka, scram_clients))
            results["Kafka"] = measure(variants, args)
            if args.latency_rate:
                latencies["Kafka"] = measure_latency(variants, args)
    finally:
        for system in reversed(started):
            system.stop()
        shutil.rmtree(root, ignore_errors=True)
    text = report(results, args, latencies)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tls_scram.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
