"""What a broker's data directory says about itself: ``meta.properties`` with ``broker.id`` and
``cluster.id``. The broker writes it when it first claims the directory; a Spark executor reading
segments straight from storage reads it to tell which broker a partition's copy belongs to."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ember.wire.config_def import read_properties

META_FILE = "meta.properties"


def read_meta(data_dir: Path) -> Optional[dict[str, str]]:
    """The directory's ``meta.properties`` (None: not claimed yet)."""
    path = data_dir / META_FILE
    return read_properties(path) if path.exists() else None


def write_meta(data_dir: Path, broker_id: int, cluster_id: str) -> None:
    """Claim the directory for ``broker_id`` of ``cluster_id`` (atomically: temp file, rename)."""
    path = data_dir / META_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"broker.id={broker_id}\ncluster.id={cluster_id}\n")
    tmp.replace(path)


def broker_id_of(data_dir: Path) -> Optional[int]:
    """The broker id a data dir belongs to, from its ``meta.properties`` (lines that are no
    ``key=value`` skipped) or a ``broker-<id>`` name; None when it cannot tell."""
    path = data_dir / META_FILE
    try:
        meta = read_properties(path, strict=False) if path.is_file() else {}
    except OSError:
        meta = {}
    broker_id = meta.get("broker.id", "")
    if broker_id.isdigit():
        return int(broker_id)
    prefix, _, suffix = data_dir.name.rpartition("-")
    return int(suffix) if prefix == "broker" and suffix.isdigit() else None
