"""Spark session set-up shared by jobs, tests and benchmarks: Delta jars, the venv's Python.

Delta's JVM jars are fetched once (``python -m ember.spark_env fetch-jars``, run by set-up) into a
local cache; every session then points ``spark.jars`` at the cached files, so nothing is downloaded
per run. Maven Central carries ``delta-spark_4.2_2.13`` up to 4.4.0 (the Python package is 4.4.1);
the JVM side is pinned to that release.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

DELTA_VERSION = "4.4.0"
DELTA_ARTIFACTS = (f"io.delta_delta-spark_4.2_2.13-{DELTA_VERSION}.jar", f"io.delta_delta-storage-{DELTA_VERSION}.jar")
DELTA_PACKAGE = f"io.delta:delta-spark_4.2_2.13:{DELTA_VERSION}"
REPO_ROOT = Path(__file__).resolve().parents[1]
IVY_SETTINGS = REPO_ROOT / "conf" / "ivysettings.xml"
JAR_CACHE = Path(os.environ.get("EMBER_JAR_CACHE", REPO_ROOT / ".cache" / "jars"))


def delta_jars() -> list[Path]:
    return [JAR_CACHE / name for name in DELTA_ARTIFACTS]


def fetch_delta_jars() -> list[Path]:
    """Resolve Delta through Spark's own Maven resolver once; keep only Delta's two jars
    (its other transitive jars duplicate, in older versions, what Spark already ships)."""
    jars = delta_jars()
    if all(jar.exists() for jar in jars):
        return jars
    print(f"[setup] fetching Delta {DELTA_VERSION} jars from Maven Central into {JAR_CACHE}", flush=True)
    from pyspark.sql import SparkSession

    with tempfile.TemporaryDirectory() as ivy:
        spark = (SparkSession.builder.master("local[1]").appName("ember-fetch-delta")
                 .config("spark.jars.packages", DELTA_PACKAGE).config("spark.jars.ivy", ivy)
                 .config("spark.jars.ivySettings", str(IVY_SETTINGS))
                 .config("spark.ui.enabled", "false").getOrCreate())
        spark.stop()
        JAR_CACHE.mkdir(parents=True, exist_ok=True)
        for jar in jars:
            shutil.copy(Path(ivy) / "jars" / jar.name, jar)
    return jars


def configure_local_environment() -> None:
    """Spark's Python workers must run this interpreter, or they crash importing pyarrow; and a
    local session binds loopback only (Spark otherwise picks the first non-loopback interface)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def spark_session(app_name: str = "ember", master: str = "local[2]", extra: dict[str, str] | None = None):
    """A local SparkSession with Delta and the ember data source registered."""
    configure_local_environment()
    from pyspark.sql import SparkSession

    missing = [str(jar) for jar in delta_jars() if not jar.exists()]
    if missing:
        raise RuntimeError(f"Delta jars missing ({', '.join(missing)}): run `make setup`")
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.jars", ",".join(str(jar) for jar in delta_jars()))
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               # Delta rebuilds table snapshots with 50 tasks by default: far too many on 2 cores.
               .config("spark.databricks.delta.snapshotPartitions", "2"))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


if __name__ == "__main__":
    if sys.argv[1:] == ["fetch-jars"]:
        fetch_delta_jars()
    else:
        print("usage: python -m ember.spark_env fetch-jars", file=sys.stderr)
        sys.exit(2)
