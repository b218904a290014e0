"""The ``ember`` command line: every command module is listed, bad arguments get a clear error."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_cli_lists_every_command_module():
    out = subprocess.run([sys.executable, "-m", "ember.cli", "--help"], capture_output=True, text=True, check=True)
    commands = sorted(p.stem for p in (REPO / "platform" / "commands").glob("*.py") if p.stem != "__init__")
    for command in commands:
        assert command in out.stdout


def test_cli_reports_a_malformed_argument_without_a_traceback():
    out = subprocess.run([sys.executable, "-m", "ember.cli", "topics", "list", "--bootstrap", "not-an-address"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "is not HOST:PORT" in out.stderr and "Traceback" not in out.stderr
