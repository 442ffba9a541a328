"""Stopping a job cleanly on SIGTERM or SIGUSR1 (a scheduler's stop or early warning) or a terminal's Ctrl-C
(SIGINT to the whole process group): a training process raises a flag that the loop all-reduces with a
step's outputs, so every process stops after the same step with a checkpoint and exits with EXIT_STOPPED.
A second Ctrl-C stops at once (KeyboardInterrupt, status 130). Passing the signals on to child processes is
tf_recipes.operations.spawn's. And the threads a process's exit does not wait for (`leave_behind`)."""

from __future__ import annotations

import os
import re
import signal
import sys

from tf_recipes.contract import STOPPED_FILE

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_left_behind = []  # threads that may still run when the process exits


def leave_behind(thread) -> None:
    """The process's exit does not wait for `thread` (tf_recipes.cli.leave): the Trainer's release of its
    training iterator, which under MultiWorkerMirroredStrategy outlasted the peers by up to a minute
    (TF 2.17)."""
    _left_behind.append(thread)


def left_behind() -> bool:
    """True while a thread left behind still runs."""
    return any(thread.is_alive() for thread in _left_behind)


def stopped_marker(results_dir: str) -> str:
    """The file the chief writes when the job stopped on a signal: {"step", "total_steps", "signal"}."""
    return os.path.join(results_dir, STOPPED_FILE)


def peer_error_summary(error: Exception) -> str:
    """The line of a collective's error that says what happened to the peer (not "Graph execution error:")."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # Distributed: the line that names the lost peer
    peer = r"heartbeat|shut down|task:\d+|[Cc]onnection|[Ss]ocket|Timed out"
    telling = [line for line in lines if re.search(peer, line)]
    return (telling or lines or [type(error).__name__])[0][:200]


class StopFlag:
    """Records the first SIGTERM/SIGUSR1 this process receives; the training loop polls it. Install it after
    a MultiWorkerMirroredStrategy exists, which replaces any SIGTERM handler installed before."""

    signal_name: str | None = None  # set: a stop is requested
    interrupts = 0  # SIGINTs received

    def install(self) -> "StopFlag":
        """Handle SIGTERM and SIGUSR1 (a scheduler's stop, or SLURM's warning before the time limit) and
        Ctrl-C: each only sets the flag, which the loop reads between compiled calls, so that a stop never
        interrupts a collective that the other processes are waiting in."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._handle)
        # Ctrl-C only where SIGINT is not ignored: a job started in the background keeps ignoring it
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, self._interrupt)
        return self

    def _interrupt(self, signum, frame) -> None:
        """Ctrl-C: the first stops after the current step with a checkpoint, as SIGTERM does; a second one
        is Python's KeyboardInterrupt, for a user who will not wait for the checkpoint."""
        self.interrupts += 1
        if self.interrupts > 1:  # the second Ctrl-C: at once
            raise KeyboardInterrupt
        self._handle(signum, frame)
        print("(Ctrl-C again to stop at once, without a checkpoint)", file=sys.stderr, flush=True)

    def _handle(self, signum, frame) -> None:
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
            message = f"{self.signal_name} received: stopping after the current step, with a checkpoint"
            print(message, file=sys.stderr, flush=True)
