#!/usr/bin/env bash
# Idempotent set-up for the ember-vs-Kafka benchmark (run.sh calls it; quick when all is in place).
#
#   1. confluent-kafka (Kafka's Python client, librdkafka) and matplotlib (the chart) are pip-installed
#      into the project's .venv. They are benchmark-only: the project itself does not depend on them.
#   2. Apache Kafka 4.x broker jars (kafka_2.13 and its runtime dependencies, ember.jars.KAFKA_BROKER)
#      and Spark's Kafka connector (ember.jars.SPARK_KAFKA, also fetched by `make setup`) from Maven
#      Central into .cache/jars/, by the project's own fetcher (Ivy from pyspark's jars; no mvn).
#      A set is fetched again only when its coordinates change.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$ROOT/.venv"

say() { echo "[vs_kafka setup] $*"; }

[ -x "$VENV/bin/python" ] || { echo "no $VENV: run 'make setup' first" >&2; exit 1; }
command -v java >/dev/null || { echo "java (17+) is needed for the Kafka brokers" >&2; exit 1; }

if ! "$VENV/bin/python" -c "import confluent_kafka, matplotlib" 2>/dev/null; then
    say "pip install confluent-kafka matplotlib into .venv (benchmark only)"
    "$VENV/bin/pip" install -q "confluent-kafka>=2.6,<3" "matplotlib>=3.8,<4"
fi

"$VENV/bin/python" -m ember.jars fetch kafka-broker spark-kafka
say "ready"
