"""Test helpers for jobs that run in the background: start `invoke run`, follow its progress, and
find, signal or freeze one of its training processes (on the host or inside a container: the host's
/proc shows both)."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

from helpers import REPO


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Job:
    """`invoke run ...` started in its own session, its output collected while it runs."""

    def __init__(self, *invoke_args, env=None, interruptible=False):
        """`interruptible`: invoke takes SIGINT as a terminal's foreground command does, also when this
        suite runs where SIGINT is ignored (a shell without job control starts a background command,
        and so every process under it, with SIGINT ignored; a process inherits that through exec)."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "invoke", *invoke_args], cwd=REPO, text=True, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
            preexec_fn=default_sigint if interruptible else None)
        self.stdout, self.stderr = [], []
        self._readers = [threading.Thread(target=self._read, args=(stream, lines), daemon=True)
                         for stream, lines in ((self.process.stdout, self.stdout), (self.process.stderr, self.stderr))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines):
        for line in stream:
            lines.append(line)

    def last_step(self) -> int:
        steps = [int(m.group(1)) for line in list(self.stdout) for m in [re.search(r"step\s+(\d+)/", line)] if m]
        return max(steps, default=0)

    def wait_for_step(self, step: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.last_step() < step:
            if self.process.poll() is not None:
                raise AssertionError(f"the job ended (status {self.process.returncode}) before step {step}:\n"
                                     + self.output()[-6000:])
            if time.monotonic() > deadline:
                raise AssertionError(f"no step {step} within {timeout} s:\n" + self.output()[-6000:])
            time.sleep(0.1)

    def wait(self, timeout: float) -> int:
        try:
            self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for reader in self._readers:
            reader.join(timeout=10)
        return self.process.returncode

    def output(self) -> str:
        return "".join(self.stdout) + "\n--- stderr ---\n" + "".join(self.stderr)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def training_processes(results_dir) -> dict[int, int]:
    """{rank: pid} of the train.py processes writing to `results_dir` (host path, or /results when
    they run in a container whose results volume is `results_dir`)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().decode(errors="replace").split("\0")
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = dict(item.split("=", 1) for item in handle.read().decode(errors="replace").split("\0")
                               if "=" in item)
        except OSError:
            continue
        if not any(arg.endswith("/train.py") for arg in argv) or "--results-dir" not in argv:
            continue
        target = argv[argv.index("--results-dir") + 1]
        if target != str(results_dir) and not (target == "/results" and _mounts(int(entry), results_dir)):
            continue
        found[_rank(argv, environ)] = int(entry)
    return found


def _rank(argv, environ) -> int:
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if name in environ:
            return int(environ[name])
    match = re.search(r'"index":\s*(\d+)', environ.get("TF_CONFIG", ""))
    return int(match.group(1)) if match else 0


def _mounts(pid: int, host_path) -> bool:
    """Whether process `pid` sees `host_path` mounted at /results (a container's results volume).

    The mount's root is the host folder's path within its file system: the whole path, or its tail
    when the folder lies on a file system of its own (a tmpfs /tmp). Not its last name alone: two
    containers of two tests running side by side may both mount a folder named `results`."""
    source = os.path.realpath(host_path).rstrip("/")
    try:
        with open(f"/proc/{pid}/mountinfo") as handle:
            roots = [fields[3].rstrip("/") for fields in map(str.split, handle) if fields[4] == "/results"]
    except OSError:
        return False
    return any(root and source.endswith(root) for root in roots)


def wait_for_processes(results_dir, count: int, timeout: float = 120) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = training_processes(results_dir)
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{count} training processes for {results_dir} did not appear; found {found}")


def signal_rank(results_dir, rank: int, signum) -> int:
    """Send `signum` to training process `rank` of the job writing to `results_dir`; return its pid."""
    pid = training_processes(results_dir)[rank]
    os.kill(pid, signum)
    return pid
