"""A broker process leaves out what it never uses: numpy (pyarrow imports it whenever it is
installed: the bench's set-up installs it, with matplotlib) and hypothesis (kio imports it to
register test strategies; a test dependency here), 21 MB of every broker's RSS where both are."""
from __future__ import annotations

import subprocess
import sys

NOT_IN_A_BROKER = ("numpy", "hypothesis")


def imported(stderr: str) -> set[str]:
    """Top-level packages named by ``python -X importtime``'s lines."""
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def test_ember_broker_start_imports_neither_numpy_nor_hypothesis():
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "ember.cli", "broker", "start", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    packages = imported(out.stderr)
    assert "pyarrow" in packages                    # the broker command's own imports did run
    assert not packages & set(NOT_IN_A_BROKER)


def test_other_commands_keep_them():
    """Only a broker process leaves them out: after another command, both import as installed
    (hypothesis always is where the tests run; numpy is not blocked, installed or not)."""
    code = ("import sys\nsys.argv = ['ember', 'topics', '--help']\nfrom ember import cli\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\nimport hypothesis\n"
            "print(sorted(name for name in ('numpy', 'hypothesis') if name in sys.modules and sys.modules[name] is None))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_whole_broker_loads_without_them():
    code = ("import sys\nfrom ember.cli import _leave_out_of_the_broker\n_leave_out_of_the_broker()\n"
            "import ember.server.broker, ember.protocol.kafka.listener\n"
            f"print(sorted(name for name in {NOT_IN_A_BROKER!r} if sys.modules.get(name)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_a_broker_loads_prometheus_client_only_for_metrics_listen():
    """prometheus_client brings http.server, urllib and email (~3 MB of every broker's RSS): only the
    metrics endpoint imports it. The log cleaner's collector once put it back into every broker."""
    code = ("import sys\nimport ember.server.broker, ember.protocol.kafka.listener\n"
            "print(sorted(name for name in ('prometheus_client', 'http.server') if name in sys.modules))\n"
            "import ember.server.metrics_service\n"
            "print('prometheus_client' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[]", "True"]
