"""ci/reaper.py, which ci/test.sh runs under: what the command leaves running in the background (as
ci/docker-engine.sh leaves dockerd, ci/slurm-cluster.sh munged, slurmctld and slurmd) is stopped when the
command ends, its CPU time is counted, and the command's exit status is kept."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REAPER = Path(__file__).resolve().parents[2] / "ci" / "reaper.py"
BURN = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass\ntime.sleep(600)\n"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_daemon_left_behind_is_stopped_and_its_cpu_time_counted(tmp_path):
    pid_file, script = tmp_path / "daemon.pid", tmp_path / "daemon.py"
    script.write_text(BURN)
    # The daemon detaches as daemons do (a new session, its parent gone), burns 1 s of CPU, then waits.
    command = f"setsid {sys.executable} {script} >/dev/null 2>&1 & echo $! > {pid_file}; sleep 2; exit 7"
    started = time.monotonic()
    process = subprocess.run([sys.executable, str(REAPER), "bash", "-c", command], capture_output=True, text=True,
                             timeout=120)
    assert process.returncode == 7, process.stderr
    assert not alive(int(pid_file.read_text())), "the daemon outlived the run"
    assert time.monotonic() - started < 60  # stopped by SIGTERM, not after a grace period
    line = process.stderr.strip().splitlines()[-1]
    assert "stopped what it left running (python" in line, line
    cpu = float(re.search(r"daemons included, (\d+) s over", line).group(1))
    assert cpu >= 1, line  # the daemon's second of CPU, reaped here, is in the count


def test_a_daemon_that_ignores_sigterm_is_killed(tmp_path):
    pid_file, script = tmp_path / "daemon.pid", tmp_path / "daemon.py"
    script.write_text("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n")
    command = f"setsid {sys.executable} {script} >/dev/null 2>&1 & echo $! > {pid_file}; sleep 1"
    env = {**os.environ, "TF_RECIPES_REAPER_GRACE": "2"}
    process = subprocess.run([sys.executable, str(REAPER), "bash", "-c", command], capture_output=True, text=True,
                             timeout=120, env=env)
    assert process.returncode == 0, process.stderr
    assert not alive(int(pid_file.read_text()))


def test_a_command_killed_by_a_signal_gives_the_shells_status():
    process = subprocess.run([sys.executable, str(REAPER), "bash", "-c", "kill -TERM $$"], capture_output=True,
                             text=True, timeout=60)
    assert process.returncode == 128 + 15


def test_without_a_command_it_says_how_to_use_it():
    process = subprocess.run([sys.executable, str(REAPER)], capture_output=True, text=True, timeout=60)
    assert process.returncode == 2 and process.stderr.startswith("usage: python3 ci/reaper.py COMMAND")
