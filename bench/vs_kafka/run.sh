#!/usr/bin/env bash
# ember vs Apache Kafka, side by side: set up (idempotent), then run every workload and write
# bench/results/vs_kafka.{md,png,json}. Options go to run.py (--help lists them), e.g.
#
#   bash bench/vs_kafka/run.sh                              # every workload but partitions, ~16 minutes on 2 cores
#   bash bench/vs_kafka/run.sh --only produce,consume       # a subset
#   bash bench/vs_kafka/run.sh --spark-records 10000000     # the 10M-record Spark read
#
# Which ember is measured: the committed HEAD by default, exported (git archive) into
# .cache/ember-src/<commit> and put first on PYTHONPATH for this process, its brokers and Spark's
# workers. A shared working tree may hold someone's half-done edits; a benchmark of those says
# nothing. EMBER_BENCH_SOURCE=worktree measures the working tree instead.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"

bash "$HERE/setup.sh"

if [ "${EMBER_BENCH_SOURCE:-commit}" != worktree ] && git -C "$ROOT" rev-parse --verify -q HEAD >/dev/null; then
    commit="$(git -C "$ROOT" rev-parse HEAD)"
    snapshot="$HERE/.cache/ember-src/$commit"
    if [ ! -d "$snapshot/path/ember" ]; then
        rm -rf "$HERE/.cache/ember-src"
        mkdir -p "$snapshot/path"
        git -C "$ROOT" archive "$commit" platform conf | tar -x -C "$snapshot"
        if git -C "$ROOT" cat-file -e "$commit:setup.py" 2>/dev/null; then    # ember's C extension, built for this copy
            git -C "$ROOT" archive "$commit" setup.py pyproject.toml README.md | tar -x -C "$snapshot"
            (cd "$snapshot" && "$ROOT/.venv/bin/python" setup.py -q build_ext --inplace >/dev/null)
        fi
        ln -s ../platform "$snapshot/path/ember"
    fi
    export PYTHONPATH="$snapshot/path${PYTHONPATH:+:$PYTHONPATH}"
    export EMBER_JAR_CACHE="${EMBER_JAR_CACHE:-$ROOT/.cache/jars}"    # the jars stay where set-up put them (ember.jars)
    export EMBER_BENCH_SOURCE="commit ${commit:0:10}"
else
    export EMBER_BENCH_SOURCE="working tree"
fi
echo "[vs_kafka] measuring ember from the $EMBER_BENCH_SOURCE"
exec "$ROOT/.venv/bin/python" "$HERE/run.py" "$@"
