"""The package layers hold (docs/architecture.md): the client loads no broker code, and
import-linter, as ``make lint`` runs it, fails the build on an upward import."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
BROKER_PACKAGES = ("ember.log", "ember.ingest", "ember.groups", "ember.cluster", "ember.zk", "ember.server",
                   "ember.protocol", "ember.metrics", "ember.launcher")


def test_importing_the_client_loads_no_broker_code():
    out = subprocess.run([sys.executable, "-c", "import sys, ember.client; print('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True, timeout=60)
    loaded = {name for name in out.stdout.split() if name.startswith("ember.")}
    assert "ember.client.consumer" in loaded
    assert not {name for name in loaded if name.startswith(BROKER_PACKAGES)}
    assert "kazoo" not in out.stdout.split()


def _lint_copy(tmp_path: Path, edit: tuple[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """lint-imports with the repository's contracts over a copy of ``platform/`` (``edit``: a module
    path inside it and a line appended to it)."""
    shutil.copytree(REPO / "platform", tmp_path / "ember", ignore=shutil.ignore_patterns("__pycache__"))
    # A regular package: found first on PYTHONPATH. Left a namespace package, like platform/, it
    # would merge with the editable install's portion and the analysis would pick either.
    (tmp_path / "ember" / "__init__.py").write_text("")
    if edit is not None:
        with open(tmp_path / "ember" / edit[0], "a") as module:
            module.write(edit[1] + "\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}   # the copy shadows the installed package
    return subprocess.run([str(LINT_IMPORTS), str(REPO / "pyproject.toml"), "--no-cache"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_the_layers_contract_holds_on_a_copy_of_the_code(tmp_path):
    result = _lint_copy(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_fails_the_layers_contract(tmp_path):
    result = _lint_copy(tmp_path, ("record/crc.py", "import ember.log  # upward: the batch format needs no storage"))
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and "ember.record.crc -> ember.log" in result.stdout


def test_a_client_importing_the_broker_core_fails_its_forbidden_contract(tmp_path):
    result = _lint_copy(tmp_path, ("client/offsets.py", "import ember.ingest.partition"))
    assert result.returncode != 0
    assert "Clients never load the broker" in result.stdout and "ember.client.offsets -> ember.ingest.partition" \
        in result.stdout
