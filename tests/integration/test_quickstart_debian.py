"""The README's quick start, as written, on a fresh Debian machine: a minimal root filesystem from
ci/debian-rootfs.sh (python3, python3-venv, ca-certificates) with this checkout copied in, entered with
chroot. Debian 13 (Python 3.13) must set up stack `current`, Debian 12 (Python 3.11) stack `ngc-25.02`,
and both must train, write results.json and export the model, printing no error line on the way (no line
that starts with E or says ERROR: these machines have no GPU, so ci/setup.sh installs tensorflow-cpu).

Needs root, debootstrap and chroot (ci/test.sh runs as root, and its ci/docker-engine.sh installs
debootstrap); without them the test fails, it never skips. What the machine supplies, as a site does:
its CA bundle (PIP_CERT, for a TLS-intercepting proxy) and its resolv.conf. Kept between runs: the
pristine root filesystems (ci/debian-rootfs.sh's cache) and pip's cache, bind-mounted into each tree from
${XDG_CACHE_HOME:-~/.cache}/tf-recipes/pip-quickstart, so TensorFlow's wheels download once per machine.
(pip keeps only downloads served with caching headers, as PyPI's are; behind a proxy that strips them,
every run downloads again.) Each run's output is kept in its tmp_path as quick-start.log.
"""
import contextlib
import json
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import pytest

from ci.nightly.matrix import shell_lines
from tf_recipes import contract
from error_checks import error_lines
from helpers import REPO, RESULT_FIELDS

pytestmark = [pytest.mark.slow, pytest.mark.repository]

# suite -> (its python3, the stack ci/setup.sh must pick for it)
SUITES = {"bookworm": ("3.11", "ngc-25.02"), "trixie": ("3.13", "current")}
CHECKOUT = "home/user/tf-recipes"  # where the checkout lies in the tree
HOST_CA = pathlib.Path("/etc/ssl/certs/ca-certificates.crt")
SITE_CA = "etc/ssl/certs/site-ca.crt"
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "tf-recipes"
TIMEOUT = 1500  # seconds for the quick start; a cold pip cache downloads ~600 MB of TensorFlow


def quick_start_line() -> str:
    """The shell line of the first ```bash block under README.md's "## Quick start"."""
    text = (REPO / "README.md").read_text()
    section = re.search(r"^## Quick start\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    block = section and re.search(r"```bash\n.*?```", section.group(1), flags=re.S)
    lines = list(shell_lines(block.group(0))) if block else []
    if len(lines) != 1:
        pytest.fail(f"README.md's '## Quick start' should hold one ```bash block of one line, found {lines}",
                    pytrace=False)
    return lines[0]


def require_root_debootstrap_chroot() -> None:
    missing = [what for what, there in (("root", os.geteuid() == 0), ("debootstrap", shutil.which("debootstrap")),
                                        ("chroot", shutil.which("chroot"))) if not there]
    if missing:
        pytest.fail(f"cannot build and enter a Debian root filesystem without {', '.join(missing)} "
                    "(run as root; apt-get install debootstrap debian-archive-keyring)", pytrace=False)


def copy_checkout(target: pathlib.Path) -> None:
    """The files git lists (committed or not, ignored ones left out: no .venv, results or builds)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.exists() or source.is_symlink():  # a file deleted but not yet committed is not copied
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name, follow_symlinks=False)


def mounts_under(root: pathlib.Path) -> list[str]:
    points = [line.split()[1] for line in pathlib.Path("/proc/self/mounts").read_text().splitlines()]
    return [point for point in points if point == str(root) or point.startswith(f"{root}/")]


@contextlib.contextmanager
def bind_mounts(root: pathlib.Path, binds: list[tuple[str, str]]):
    """Each (host folder, folder in root) bound for the block, unmounted afterwards, lazily if busy."""
    done = []
    try:
        for source, inside in binds:
            (root / inside).mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "--bind", source, root / inside], check=True)
            done.append(root / inside)
        yield
    finally:
        for point in reversed(done):
            if subprocess.run(["umount", point], capture_output=True).returncode:
                subprocess.run(["umount", "-l", point])
        # What is still mounted must not be deleted through (pytest removes old tmp_paths).
        assert not mounts_under(root), f"still mounted: {mounts_under(root)}"


def in_chroot(root: pathlib.Path, command: str, timeout: float) -> subprocess.CompletedProcess:
    """`bash -c COMMAND` in root with a clean environment; on timeout everything it started is killed."""
    env = {"HOME": "/root", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           **dict.fromkeys(("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"), f"/{SITE_CA}")}
    argv = [shutil.which("chroot"), str(root), "/bin/bash", "-c", command]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"not done after {timeout} s: {command}\n--- stdout ---\n{stdout[-3000:]}\n"
                    f"--- stderr ---\n{stderr[-6000:]}")
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


# Every push runs Debian 12's; the night Debian 13's too.
@pytest.mark.parametrize("suite", ["bookworm", pytest.param("trixie", marks=pytest.mark.full)])
def test_the_readme_quick_start_works_on_a_fresh_debian(suite, tmp_path):
    python, stack = SUITES[suite]
    line = quick_start_line()
    require_root_debootstrap_chroot()
    root = (tmp_path / "rootfs").resolve()
    started = time.monotonic()
    made = subprocess.run(["bash", str(REPO / "ci" / "debian-rootfs.sh"), suite, str(root)], capture_output=True,
                          text=True, timeout=900)
    assert made.returncode == 0, made.stderr
    copy_checkout(root / CHECKOUT)
    shutil.copyfile(HOST_CA, root / SITE_CA)
    shutil.copyfile("/etc/resolv.conf", root / "etc" / "resolv.conf")
    pip_cache = CACHE / "pip-quickstart"
    pip_cache.mkdir(parents=True, exist_ok=True)
    ready = time.monotonic()

    binds = [("/proc", "proc"), ("/sys", "sys"), ("/dev", "dev"), ("/dev/shm", "dev/shm"),
             (str(pip_cache), "root/.cache/pip")]
    with bind_mounts(root, binds):
        version = in_chroot(root, "python3 -c 'import platform; print(platform.python_version())'", 60)
        assert version.stdout.startswith(f"{python}."), f"python3 in {suite}: {version.stdout} {version.stderr}"
        run = in_chroot(root, f"cd /{CHECKOUT} && {line}", TIMEOUT)
    print(f"{suite}: root filesystem and checkout {ready - started:.0f} s, quick start "
          f"{time.monotonic() - ready:.0f} s")
    (tmp_path / "quick-start.log").write_text(f"$ {line}\n--- stdout ---\n{run.stdout}\n--- stderr ---\n{run.stderr}")

    shown = f"--- stdout ---\n{run.stdout[-4000:]}\n--- stderr ---\n{run.stderr[-6000:]}"
    assert run.returncode == 0, f"`{line}` exited {run.returncode} on {suite}\n{shown}"
    chosen = re.search(r"^\[setup\] stack (\S+) \(TensorFlow (\S+);", run.stderr, flags=re.M)
    assert chosen and chosen.group(1) == stack, f"{suite} (Python {python}) should set up stack {stack}\n{shown}"
    output = (run.stdout + run.stderr).splitlines()
    # No CUDA start-up errors either: without an NVIDIA GPU ci/setup.sh installs tensorflow-cpu.
    assert "[setup] TensorFlow wheel tensorflow-cpu (no NVIDIA GPU here)" in run.stderr, shown
    bad = error_lines(run.stdout + run.stderr)
    assert not bad, f"a successful quick start printed error lines: {bad}\n{shown}"

    printed = [text.removeprefix("results: ") for text in output if text.startswith("results: ")]
    assert len(printed) == 1, f"the run should print where {contract.RESULTS_FILE} went\n{shown}"
    inside = pathlib.PurePosixPath(printed[0])
    assert inside.name == contract.RESULTS_FILE and inside.is_relative_to(f"/{CHECKOUT}/results/mnist-cnn"), inside
    results_dir = root / inside.parent.relative_to("/")
    results = json.loads((results_dir / contract.RESULTS_FILE).read_text())
    assert RESULT_FIELDS <= results.keys(), sorted(RESULT_FIELDS - results.keys())
    assert results["recipe"] == "mnist-cnn" and results["launcher"] == "single"
    assert results["losses"] and all(math.isfinite(entry["loss"]) for entry in results["losses"]), results["losses"]
    assert results["versions"]["tensorflow"] == chosen.group(2), results["versions"]
    assert results["versions"]["python"].startswith(f"{python}."), results["versions"]
    assert (results_dir / contract.EXPORT_DIR / "1" / "saved_model.pb").is_file()  # a new model base's first version

    shutil.rmtree(root)  # gigabytes of venv; a failed run's tree is kept for a look
