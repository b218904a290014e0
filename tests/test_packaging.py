"""The repository layout contract: platform/ is `ember`, and never shadows the stdlib `platform`."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_stdlib_platform_is_not_shadowed_from_repo_root():
    out = subprocess.run([sys.executable, "-c", "import platform; print(platform.system())"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() in {"Linux", "Darwin", "Windows"}


def test_platform_folder_has_no_init():
    assert not (REPO / "platform" / "__init__.py").exists()


def test_ember_maps_to_platform_folder():
    import ember.errors
    assert Path(ember.errors.__file__).resolve().parent == REPO / "platform"
