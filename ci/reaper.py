"""Run a command so that nothing it starts outlives it, and count the CPU time of all of it.

    python3 ci/reaper.py COMMAND [ARG...]      # ci/test.sh runs itself this way

This process makes itself the child subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux): a process the
command starts in the background and leaves behind (dockerd and containerd with their shims,
munged, slurmctld, the slurmd of each node) is re-parented here instead of to init. When the command
ends, those still running are stopped: SIGTERM, then SIGKILL after GRACE seconds. A daemon that
was already running before the command (a system Docker engine) is not a descendant and is left
alone. Every descendant is reaped here, so this process's resource usage counts all of them
(`/usr/bin/time python3 ci/reaper.py ...` sees the image builds inside dockerd, the containers and
the SLURM jobs); the last line says so, and the exit status is the command's.

Standard library only: it runs before any venv exists."""
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
# Seconds a left-behind process has to stop on SIGTERM before SIGKILL (dockerd stops its containers first).
GRACE = float(os.environ.get("TF_RECIPES_REAPER_GRACE", "30"))
KILLED_GRACE = 10  # seconds to wait for SIGKILL to take effect before giving up
TICK = 0.2


def children() -> dict[int, str]:
    """This process's children now, by pid, with their command names (from /proc)."""
    me = os.getpid()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read()
        except OSError:
            continue
        name = fields[fields.index("(") + 1:fields.rindex(")")]
        if int(fields[fields.rindex(")") + 2:].split()[1]) == me:
            found[int(entry)] = name
    return found


def reap() -> None:
    """Collect every child that has exited, without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def send(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_left_behind() -> list[str]:
    """Stop what the command left running; return the names of what had to be stopped."""
    reap()
    left = children()
    if not left:
        return []
    send(left, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while time.monotonic() < deadline:
        reap()
        now = children()
        if not now:
            return sorted(set(left.values()))
        send(set(now) - set(left), signal.SIGTERM)  # re-parented since (a daemon's own children)
        left.update(now)
        time.sleep(TICK)
    deadline = time.monotonic() + KILLED_GRACE
    while children() and time.monotonic() < deadline:  # a process stuck in the kernel may never go
        send(children(), signal.SIGKILL)
        time.sleep(TICK)
        reap()
    left.update(children())
    return sorted(set(left.values()))


def wait_for(pid: int) -> int:
    """Wait for the command, reaping every orphan that exits meanwhile (no zombies pile up); its exit code."""
    while True:
        try:
            child, status = os.waitpid(-1, 0)
        except ChildProcessError:  # cannot happen while the command runs; be safe
            return 1
        if child == pid:
            return os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python3 ci/reaper.py COMMAND [ARG...]", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"ci/reaper.py: cannot become the child subreaper ({os.strerror(ctypes.get_errno())}); "
              "running the command without it", file=sys.stderr)
    started = time.monotonic()
    command = subprocess.Popen(argv)
    # A signal to this process (a cancelled CI job) goes on to the command, which ends its own work.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda number, frame: command.send_signal(number))
    status = wait_for(command.pid)
    stopped = stop_left_behind()
    wall = time.monotonic() - started
    usage = os.times()
    cpu = usage.children_user + usage.children_system
    what = f"stopped what it left running ({', '.join(stopped)}); " if stopped else ""
    line = (f"[reaper] {shlex.join(argv)}: {what}user+system of everything it started, daemons included, "
            f"{cpu:.0f} s over {wall:.0f} s ({cpu / wall if wall else 0:.2f} cores)")
    print(line, file=sys.stderr)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        try:
            with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as summary:
                summary.write(line + "\n")
        except OSError:
            pass
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
