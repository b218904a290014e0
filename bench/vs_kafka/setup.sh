#!/usr/bin/env bash
# Idempotent set-up for the ember-vs-Kafka benchmark (run.sh calls it; quick when all is in place).
#
#   1. confluent-kafka (Kafka's Python client, librdkafka) and matplotlib (the chart) are pip-installed
#      into the project's .venv. They are benchmark-only: the project itself does not depend on them.
#   2. Apache Kafka 4.x broker jars (kafka-pom.xml) from Maven Central into .cache/kafka-libs.
#   3. Spark's Kafka connector (spark-kafka-pom.xml) into .cache/spark-kafka-jars: the connector,
#      kafka-clients, commons-pool2 and the token provider (the rest is already in Spark).
#
# A step is redone only when its pom changed (a stamp holds the pom's hash) or its output is missing.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="$HERE/.cache"
VENV="$ROOT/.venv"

say() { echo "[vs_kafka setup] $*"; }

[ -x "$VENV/bin/python" ] || { echo "no $VENV: run 'make setup' first" >&2; exit 1; }
command -v java >/dev/null || { echo "java (17+) is needed for the Kafka brokers" >&2; exit 1; }
command -v mvn >/dev/null || { echo "mvn is needed to fetch Kafka's jars (apt-get install maven)" >&2; exit 1; }

if ! "$VENV/bin/python" -c "import confluent_kafka, matplotlib" 2>/dev/null; then
    say "pip install confluent-kafka matplotlib into .venv (benchmark only)"
    "$VENV/bin/pip" install -q "confluent-kafka>=2.6,<3" "matplotlib>=3.8,<4"
fi

# fetch POM DEST [extra mvn args...]: copy the pom's runtime dependencies into DEST, atomically.
fetch() {
    local pom="$HERE/$1" dest="$CACHE/$2"; shift 2
    local stamp; stamp="$(sha256sum "$pom" | cut -c1-16)"
    if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$stamp" ]; then
        return 0
    fi
    say "fetching $(basename "$pom") dependencies from Maven Central into ${dest#$ROOT/}"
    rm -rf "$dest.tmp"
    mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies -DoutputDirectory="$dest.tmp" -DincludeScope=runtime "$@"
    echo "$stamp" > "$dest.tmp/.stamp"
    rm -rf "$dest"
    mv "$dest.tmp" "$dest"
}

mkdir -p "$CACHE"
fetch kafka-pom.xml kafka-libs
fetch spark-kafka-pom.xml spark-kafka-jars \
    -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
say "ready: $(ls "$CACHE/kafka-libs" | grep -c 'jar$') Kafka jars, $(ls "$CACHE/spark-kafka-jars" | grep -c 'jar$') connector jars"
