"""User-given names that become paths or lines of a file. `invoke images.bootstrap --rootfs DIR` deletes
and overwrites only what it made: a folder that holds its marker file, and the tarball of this run
(debootstrap and docker are stand-in scripts on PATH that record their arguments, so nothing real runs
and no root is needed; tar is the real one). A class name is one line of the export's labels.txt."""
import os
import stat

import pytest

from commands.containers import ROOTFS_MARKER
from tf_recipes.contract import class_name_problem
from helpers import REPO, run_invoke

STAND_INS = {
    # The target is the last argument; the stand-in records what it found there, then fills it a little.
    "debootstrap": 'echo "debootstrap $*" >> "$STAND_IN_LOG"\n'
                   'for target; do :; done\n'
                   'echo "found: $(ls -A "$target")" >> "$STAND_IN_LOG"\n'
                   'mkdir -p "$target/etc" && echo 12.0 > "$target/etc/debian_version"\n',
    "docker": 'echo "docker $*" >> "$STAND_IN_LOG"\n'
              'if [ "$1" = import ]; then tar -tf "$2" | sed "s/^/member: /" >> "$STAND_IN_LOG"; fi\n'
              'exit "${STAND_IN_DOCKER_STATUS:-0}"\n',
}


@pytest.fixture
def bootstrap(tmp_path):
    """Runs `invoke images.bootstrap ARGS` with the stand-ins; .log is what they recorded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STAND_INS.items():
        script = bin_dir / name
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "stand-ins.log"

    def run(*args, env=None):
        log.unlink(missing_ok=True)
        process = run_invoke("images.bootstrap", *map(str, args), timeout=120, env={
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "STAND_IN_LOG": str(log),
            "INVOKE_TF_RECIPES_DOCKER": str(bin_dir / "docker"), **(env or {})})
        process.log = log.read_text().splitlines() if log.exists() else []
        return process

    return run


def snapshot(folder):
    """Every file and folder under `folder`, with each file's bytes."""
    return {os.path.relpath(os.path.join(parent, name), folder): (
        open(os.path.join(parent, name), "rb").read() if name in files else None)
        for parent, dirs, files in os.walk(folder) for name in dirs + files}


def a_users_folder(path):
    (path / "notes").mkdir(parents=True)
    (path / "thesis.tex").write_text("\\section{Results}\n")
    (path / "notes" / "data.bin").write_bytes(bytes(range(256)))
    return path


def assert_refused(process, *needles):
    assert process.returncode == 2, process.stdout + process.stderr
    assert "Traceback" not in process.stderr
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), process.stderr
    for needle in needles:
        assert str(needle) in lines[0], f"{needle!r} not in: {lines[0]}"
    assert process.log == [], "a command ran despite the error"


@pytest.mark.parametrize("dry", [True, False], ids=["dry", "run"])
def test_a_folder_it_did_not_make_is_left_byte_for_byte(bootstrap, tmp_path, dry):
    folder = a_users_folder(tmp_path / "mine")
    before = snapshot(folder)
    process = bootstrap("--rootfs", folder, *(["--dry"] if dry else []))
    assert_refused(process, f"--rootfs {folder} is not empty", ROOTFS_MARKER)
    assert snapshot(folder) == before


def test_a_file_is_refused(bootstrap, tmp_path):
    (tmp_path / "rootfs").write_text("not a folder\n")
    assert_refused(bootstrap("--rootfs", tmp_path / "rootfs"), "is a file, not a folder")
    assert (tmp_path / "rootfs").read_text() == "not a folder\n"


@pytest.mark.parametrize("rootfs, needle", [
    ("/", "is the root directory"),
    (REPO, "is the repository"),
    (REPO.parent, "is the repository"),
], ids=["root", "repository", "above-the-repository"])
def test_the_root_and_the_folders_holding_the_repository_are_refused(bootstrap, rootfs, needle):
    # --dry only: these must never reach a real run, even in a test of a broken checkout.
    assert_refused(bootstrap("--rootfs", rootfs, "--dry"), f"--rootfs {rootfs} {needle}")


def test_a_folder_holding_the_home_folder_is_refused_even_when_marked(bootstrap, tmp_path):
    outer = a_users_folder(tmp_path / "outer")
    (outer / ROOTFS_MARKER).write_text("")
    (outer / "home").mkdir()
    before = snapshot(outer)
    process = bootstrap("--rootfs", outer, env={"HOME": str(outer / "home")})
    assert_refused(process, f"--rootfs {outer} is your home folder")
    assert snapshot(outer) == before


def test_a_tarball_already_beside_it_is_refused(bootstrap, tmp_path):
    (tmp_path / "debian.tar").write_bytes(b"someone's archive")
    assert_refused(bootstrap("--rootfs", tmp_path / "debian"), f"{tmp_path / 'debian.tar'} exists")
    assert (tmp_path / "debian.tar").read_bytes() == b"someone's archive"
    assert not (tmp_path / "debian").exists()


def test_it_marks_the_folder_it_makes_and_deletes_only_that(bootstrap, tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "keep.txt").write_text("mine\n")
    rootfs = tmp_path / "work" / "debian"
    process = bootstrap("--rootfs", rootfs)
    assert process.returncode == 0, process.stderr
    assert process.log[0] == f"debootstrap --variant=minbase bookworm {rootfs}"
    assert process.log[1] == f"found: {ROOTFS_MARKER}"  # debootstrap fills a marked folder
    assert process.log[2] == f"docker import {rootfs}.tar tf-recipes/debian:bookworm"
    members = [line.removeprefix("member: ") for line in process.log[3:]]
    assert "./etc/debian_version" in members and f"./{ROOTFS_MARKER}" not in members  # not in the image
    assert os.listdir(tmp_path / "work") == ["keep.txt"]  # the tree and the tarball are gone


def test_a_run_cut_short_leaves_a_marked_tree_that_the_next_run_deletes(bootstrap, tmp_path):
    rootfs = tmp_path / "debian"
    failed = bootstrap("--rootfs", rootfs, env={"STAND_IN_DOCKER_STATUS": "1"})
    assert failed.returncode == 1 and "failed at: " in failed.stderr
    assert not (tmp_path / "debian.tar").exists()  # this run's tarball, half made or not imported
    assert sorted(os.listdir(rootfs)) == sorted([ROOTFS_MARKER, "etc"])
    again = bootstrap("--rootfs", rootfs)
    assert again.returncode == 0, again.stderr
    assert again.log[1] == f"found: {ROOTFS_MARKER}"  # the earlier tree was deleted first
    assert not rootfs.exists()


def test_an_empty_folder_it_was_given_is_left_there_empty(bootstrap, tmp_path):
    given = tmp_path / "mount"
    given.mkdir()
    assert bootstrap("--rootfs", given, env={"STAND_IN_DOCKER_STATUS": "1"}).returncode == 1
    process = bootstrap("--rootfs", given)  # the marked tree of the run cut short, in the user's folder
    assert process.returncode == 0, process.stderr
    assert given.is_dir() and os.listdir(given) == []


# --- class names: each is one line of the export's labels.txt ---------------------------------------

@pytest.mark.parametrize("name", ["sky", "granny smith", "Äpfel", "🍎", " leading space"])
def test_a_class_name_that_fits_on_one_line_is_taken(name):
    assert class_name_problem(name) is None


@pytest.mark.parametrize("name", ["a\nb", "a\rb", "tab\there", "bell\x07", "next\x85line", "para\u2029graph",
                                  "", "   ", "caf\udce9", None, 3])
def test_a_class_name_that_would_not_be_one_line_is_refused(name):
    assert class_name_problem(name)
