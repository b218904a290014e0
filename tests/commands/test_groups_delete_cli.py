"""``ember groups delete`` of a group that does not exist: said plainly, exit non-zero."""
from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from ember.client import Admin
from ember.errors import GroupIdNotFound
from ember.launcher.local import LocalCluster

pytestmark = pytest.mark.integration


def _ember(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True, timeout=60)


def test_deleting_a_group_that_never_existed_fails_and_says_so(shared_cluster: LocalCluster) -> None:
    group = f"never-existed-{uuid.uuid4().hex[:8]}"
    out = _ember("groups", "delete", group, "--bootstrap", shared_cluster.bootstrap)
    assert out.returncode == 1, out
    assert f"deleted group {group}" not in out.stdout
    assert f"group {group!r} does not exist" in out.stderr and "GroupIdNotFound" in out.stderr
    assert "Traceback" not in out.stderr


def test_admin_delete_of_an_unknown_group_raises_group_id_not_found(shared_cluster: LocalCluster) -> None:
    with Admin(shared_cluster.bootstrap) as admin, pytest.raises(GroupIdNotFound):
        admin.delete_group(f"never-existed-{uuid.uuid4().hex[:8]}")
