"""The repository layout contract: platform/ is `ember`, and never shadows the stdlib `platform`."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_stdlib_platform_is_not_shadowed_from_repo_root():
    out = subprocess.run([sys.executable, "-c", "import platform; print(platform.system())"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() in {"Linux", "Darwin", "Windows"}


def test_platform_folder_has_no_init():
    assert not (REPO / "platform" / "__init__.py").exists()


def test_ember_maps_to_platform_folder():
    import ember.errors
    assert Path(ember.errors.__file__).resolve().parent == REPO / "platform"


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
