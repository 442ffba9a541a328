"""Test helpers: run what a user runs (invoke, train scripts) and read what it wrote."""
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from commands.nightly import RESULT_FIELDS  # noqa: E402,F401 (what every results.json must hold)


def run_invoke(*args, timeout=900, env=None) -> subprocess.CompletedProcess:
    """`invoke ARGS` from the repository root, as a user types it; output captured as text."""
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def run_python(*args, timeout=900, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})})


def read_results(results_dir) -> dict:
    with open(os.path.join(results_dir, "results.json")) as handle:
        return json.load(handle)


def assert_ok(process: subprocess.CompletedProcess) -> None:
    assert process.returncode == 0, (
        f"exit {process.returncode}\n--- stdout ---\n{process.stdout[-4000:]}\n--- stderr ---\n{process.stderr[-6000:]}")


def horovod_available() -> bool:
    return subprocess.run([sys.executable, "-c", "import horovod.tensorflow"], capture_output=True).returncode == 0
