"""Stopping a job cleanly: stop signals, exit statuses, and passing signals on to child processes.

Schedulers stop jobs all the time: a SLURM time limit or preemption (`#SBATCH --signal` sends an
early warning), `scancel`, a Kubernetes eviction or `docker stop` (SIGTERM, then SIGKILL after a
grace period). A training process that gets SIGTERM or SIGUSR1 only raises a flag here; the training
loop all-reduces that flag with the step's outputs, so every process of the job stops after the
*same* step, the chief checkpoints it, all of them meet at a barrier and exit with EXIT_STOPPED (143).
`--resume` then continues exactly where the job stopped.

The exit statuses of every train.py, and the errors behind them, are in common/contract.py.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import sys

from tf_recipes.contract import EXIT_STOPPED, STOPPED_FILE

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def stopped_marker(results_dir: str) -> str:
    """The file the chief writes when the job stopped on a signal: {"step", "total_steps", "signal"}."""
    return os.path.join(results_dir, STOPPED_FILE)


def job_status(status: int, results_dir: str, since: float) -> int:
    """The status to report for a job that a launcher (horovodrun, mpirun) ended with `status`:
    EXIT_STOPPED when the training processes stopped on a signal after `since` (a time.time()),
    whatever status the launcher itself chose, else `status`."""
    marker = stopped_marker(results_dir)
    # Horovod: horovodrun and mpirun report a stop of their ranks as a failure
    if status and os.path.exists(marker) and os.path.getmtime(marker) >= since:
        return EXIT_STOPPED
    return status


def peer_error_summary(error: Exception) -> str:
    """The line of a collective's error that says what happened to the peer (TensorFlow's first
    line is often just "Graph execution error:")."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # Distributed: the line that names the lost peer
    telling = [line for line in lines
               if re.search(r"heartbeat|shut down|task:\d+|[Cc]onnection|[Ss]ocket|Timed out", line)]
    return (telling or lines or [type(error).__name__])[0][:200]


class StopFlag:
    """Records the first SIGTERM/SIGUSR1 this process receives; the training loop polls it.

    Install it *after* a MultiWorkerMirroredStrategy exists: creating one installs TensorFlow's own
    SIGTERM handler (which logs and keeps training), replacing any handler installed earlier.
    """

    def __init__(self):
        self.signal_name: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def install(self) -> "StopFlag":
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
            print(f"{self.signal_name} received: stopping after the current step, with a checkpoint",
                  file=sys.stderr, flush=True)


@contextlib.contextmanager
def forwarding_stop_signals(processes):
    """While inside, SIGTERM and SIGUSR1 sent to this process go on to every process in `processes`
    (a list of subprocess.Popen, read at signal time) that is still running."""
    def forward(signum, frame):
        for process in list(processes):
            if process.poll() is None:
                process.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# prctl(2)'s option that names the signal a process gets when the thread that started it ends (Linux).
PR_SET_PDEATHSIG = 1


def stopped_with_parent():
    """A `preexec_fn` for subprocess.Popen: the child gets SIGTERM when the thread that starts it
    ends, even when its process is killed with SIGKILL, which no handler sees. The child then stops
    as if that process had passed a stop signal on; a `docker run` client passes it to its
    container, which would otherwise outlive it. None where there is no such option (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before the option was set
            os._exit(EXIT_STOPPED)
    return arm
