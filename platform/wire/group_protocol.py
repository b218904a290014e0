"""What ember's consumer and the group coordinator agree on about groups: the assignor names a
member may list (the coordinator runs the chosen one, ``ember.groups.assignors``)."""
from __future__ import annotations

ASSIGNOR_NAMES: frozenset[str] = frozenset({"range", "roundrobin", "sticky"})
