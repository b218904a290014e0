"""Files only their owner can read: private keys, passwords, client configurations that log in."""
from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path``, created owner-only (never readable by others, not even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)
    os.chmod(path, 0o600)   # an existing file keeps its mode through O_CREAT
