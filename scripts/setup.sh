#!/usr/bin/env bash
# Idempotent set-up for ember: virtualenv + pip packages, Debian's zookeeper, prometheus and libfuse2, Java 17+,
# Delta's, Spark's Kafka connector's and Kafka's tools' jars.
# Quick when everything is already in place; safe to run before every command.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
STAMP="$VENV/.ember-installed"

say() { printf '[setup] %s\n' "$*"; }

# Install Debian packages (needs root; says what to run otherwise).
apt_install() {
    if [ "$(id -u)" -ne 0 ]; then
        say "error: missing Debian package(s) $*; run: sudo apt-get install $*" >&2
        exit 1
    fi
    say "installing Debian package(s): $*"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# 1. Java 17+ (Spark 4 and ZooKeeper run on it).
if ! command -v java >/dev/null 2>&1; then
    apt_install default-jre-headless
fi
java_major=$(java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print v[1]; exit}')
if [ "${java_major:-0}" -lt 17 ]; then
    say "error: Java 17 or newer is required (found ${java_major:-none}); install openjdk-17-jre-headless" >&2
    exit 1
fi

# 2. ZooKeeper server from Debian's package (we start our own instances; the system service is not used).
if [ ! -f /usr/share/java/zookeeper.jar ]; then
    apt_install zookeeper
fi

# 2b. Prometheus server and promtool from Debian's package: the metrics tests scrape a real cluster
#     with it and check conf/prometheus/ rules. Its system service is not used (we start our own).
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    apt_install --no-install-recommends prometheus
fi

# 2c. libfuse 2 (Debian's libfuse2), which pip's fusepy loads: the fault tests mount a FUSE file system
#     that fails on command (EIO, read-only) under a broker (tests/faults/faultfs.py). They run as root
#     only (mounts; skipped otherwise), and root needs no fusermount, so neither does this.
if ! compgen -G '/usr/lib/*/libfuse.so.2' >/dev/null && ! compgen -G '/lib/*/libfuse.so.2' >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
        apt_install libfuse2
    else
        say "note: no libfuse2; the FUSE fault tests (root only) will skip"
    fi
fi

# 2d. gcc and Python's headers: ember's C extensions (platform/record/_v2codec.c, platform/client/_append.c)
#     are compiled by pip's editable install (step 3) and by step 3b.
if ! command -v gcc >/dev/null 2>&1; then
    apt_install gcc
fi
if [ ! -f "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]; then
    apt_install python3-dev
fi

# 3. Python virtual environment with pinned packages (re-installed only when pyproject.toml changes).
#    Debian ships venv's ensurepip separately; a venv left without pip by a failed run is rebuilt.
if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    apt_install python3-venv
fi
if [ ! -x "$VENV/bin/pip" ]; then
    say "creating virtual environment in .venv"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
    say "installing Python packages (pyspark, delta-spark, pyarrow, kazoo, prometheus-client, pytest)"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e '.[test]'
    touch "$STAMP"
fi

# 3b. ember's C extensions (the Kafka RecordBatch v2 <-> Arrow codec, platform/record/_v2codec.c; the
#     producer's per-record send path, platform/client/_append.c), built in place next to their sources
#     (with step 2d's gcc and headers): rebuilt when a source is newer than its build.
stale_extension=""
for source in platform/record/_v2codec.c platform/client/_append.c; do
    built="$(ls "${source%.c}".*.so 2>/dev/null | head -1 || true)"
    if [ -z "$built" ] || [ "$source" -nt "$built" ]; then
        stale_extension="$source"
    fi
done
if [ -n "$stale_extension" ]; then
    say "building ember's C extensions (platform/record/_v2codec.c, platform/client/_append.c)"
    "$VENV/bin/python" setup.py -q build_ext --inplace
fi

# 4. `.venv/bin/spark-submit` must work without an activated venv: pip's launcher looks for
#    SPARK_HOME by running `python3` from PATH, which has no pyspark; make it run the venv's Python.
if grep -q '"python3"' "$VENV/bin/find-spark-home"; then
    say "pointing .venv/bin/spark-submit at the virtual environment's Python"
    sed -i "s|\"python3\"|\"$VENV/bin/python\"|" "$VENV/bin/find-spark-home"
fi

# 5. JVM jars, fetched once from Maven Central into .cache/jars/ (ember.jars; about 200 MiB the first
#    time): Delta Lake's and Spark's Kafka connector (every SparkSession), Kafka's command-line
#    tools (the Kafka-protocol tests run them with `java -cp '.cache/jars/kafka-tools/*'`), and
#    Kafka Connect's worker and Kafka Streams (with RocksDB), which the compacted-topic tests run.
"$VENV/bin/python" -m ember.jars fetch delta spark-kafka kafka-tools kafka-connect kafka-streams

say "ready"
