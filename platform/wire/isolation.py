"""Fetch's isolation level, as both wire protocols carry it (Kafka's ``isolation_level``, v4+)."""
from __future__ import annotations

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
#: the names clients use (kafka-python's ``isolation_level=``, Kafka's ``isolation.level``)
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


def isolation_level(name: str) -> int:
    """The wire value of an isolation level name; ValueError naming the choices otherwise."""
    try:
        return ISOLATION_LEVELS[name]
    except KeyError:
        raise ValueError(f"isolation_level must be read_uncommitted or read_committed, not {name!r}") from None
