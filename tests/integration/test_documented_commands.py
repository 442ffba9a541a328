"""The docs' commands that train or write data, run as written: each string below is a command of a
shell block of README.md, docs/*.md or recipes/*/README.md, word for word (tests/unit/test_readme_commands.py
fails a documented command that is neither dry-run there, nor one of these strings, nor listed there
with the reason it does not run).

Each command runs through bash, as a user's shell runs it (`~` expanded, `&&` chains), with the
virtual environment's `python` first on PATH, as after `source .venv/bin/activate`. The one thing a
test adds to a command: `--results-dir` (a temporary folder) at the end of a training command that
does not say where its results go, so that it does not write into the checkout's results/. A command
runs from the repository root; one that writes relative paths (data/, build/, results/) runs from a
scratch folder that links the repository's code folders in, so that nothing lands in the checkout;
where a command reads or writes under `~`, HOME is a temporary folder. What a command needs that
would be the user's (a download, a photo folder) is generated first, and said so.
"""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from ci.nightly import matrix as nightly
from helpers import REPO, assert_ok, read_results
from seg_pairs_data import write_pairs

pytestmark = [pytest.mark.slow, pytest.mark.repository]

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "recipes").glob("*/README.md"))]
CODE = ("recipes", "common", "tools", "ci", "commands", "tasks")  # what a scratch folder links in
TIMEOUT = 600


def documented_commands() -> set[str]:
    return {part.strip() for doc in DOCS for line in nightly.shell_lines(doc.read_text()) for part in line.split("&&")}


def documented(*commands: str) -> str:
    """The commands, each asserted to be a documented command, as one line of the docs holds them."""
    missing = [command for command in commands if command not in documented_commands()]
    assert not missing, f"no doc shows {missing} any more: remove it here"
    return " && ".join(commands)


def environment(home: pathlib.Path | None = None) -> dict:
    """The caller's, with the virtual environment first on PATH (and HOME when given)."""
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    return {**env, "HOME": str(home)} if home is not None else env


def run(line: str, cwd: pathlib.Path, home: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=environment(home), capture_output=True, text=True,
                          timeout=TIMEOUT)


def scratch(tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder where the repository's code folders are links: relative outputs land here."""
    root = tmp_path / "checkout"
    root.mkdir()
    for name in CODE:
        (root / name).symlink_to(REPO / name, target_is_directory=True)
    return root


def with_results_dir(command: str, results_dir: pathlib.Path) -> str:
    """The one word added to a training command that does not say where its results go."""
    assert "--results-dir" not in command
    return f"{command} --results-dir {shlex.quote(str(results_dir))}"


def assert_trained(results_dir: pathlib.Path, launcher: str, replicas: int, steps: int):
    results = read_results(results_dir)
    assert (results["launcher"], results["replicas"], results["steps"]) == (launcher, replicas, steps), results
    assert len(results["replica_fingerprints"]) == replicas and len(set(results["replica_fingerprints"])) == 1


# -- mnist-cnn without invoke (recipes/mnist-cnn/README.md), its export (docs/using.md) and TensorBoard
# (docs/running.md), on the results of that run -----------------------------------------------------------

MNIST_MIRRORED = "python recipes/mnist-cnn/train.py --launcher mirrored --cpu-replicas 2 --synthetic --max-steps 20"
MNIST_SPAWN = ("python -m tf_recipes.operations.spawn --nproc 2 -- python recipes/mnist-cnn/train.py "
               "--launcher multiworker --synthetic --max-steps 20")
SAVED_MODEL_CLI = "saved_model_cli show --all --dir results/mnist-cnn/export/1"
TENSORBOARD = "tensorboard --logdir results/"


@pytest.fixture(scope="module")
def mnist_run(tmp_path_factory):
    """MNIST_MIRRORED, run once; its results folder stands where the command writes it by default
    (results/mnist-cnn) in a scratch folder, for the commands that read it there."""
    tmp = tmp_path_factory.mktemp("mnist")
    results_dir = tmp / "results-dir"
    process = run(with_results_dir(documented(MNIST_MIRRORED), results_dir), cwd=REPO)
    root = scratch(tmp)
    (root / "results").mkdir()
    (root / "results" / "mnist-cnn").symlink_to(results_dir, target_is_directory=True)
    return process, results_dir, root


def test_mnist_trains_in_one_process_as_written(mnist_run):
    process, results_dir, _ = mnist_run
    assert_ok(process)
    assert_trained(results_dir, "mirrored", 2, 20)


def test_mnist_trains_in_two_processes_started_by_spawn_as_written(tmp_path):
    process = run(with_results_dir(documented(MNIST_SPAWN), tmp_path / "results"), cwd=REPO)
    assert_ok(process)
    assert_trained(tmp_path / "results", "multiworker", 2, 20)


RUN_FIRST = "python recipes/mnist-cnn/train.py --synthetic --max-steps 10 --no-export --results-dir results/first"
RUN_AGAIN = "python recipes/mnist-cnn/train.py --config results/first/config.yaml --results-dir results/again"
RUN_FASTER = ("python recipes/mnist-cnn/train.py --config results/first/config.yaml --lr 0.01 "
              "--results-dir results/faster")


def test_a_run_reruns_from_the_configuration_it_kept_as_written(tmp_path):
    """docs/running.md: a run's config.yaml run again into another folder trains the same model, bit for bit;
    a flag beside --config overrides its value, and the rerun keeps what it ran."""
    root = scratch(tmp_path)
    assert_ok(run(documented(RUN_FIRST, RUN_AGAIN, RUN_FASTER), cwd=root))
    first, again, faster = (read_results(root / "results" / name) for name in ("first", "again", "faster"))
    assert again["replica_fingerprints"] == first["replica_fingerprints"]
    assert [entry["loss"] for entry in again["losses"]] == [entry["loss"] for entry in first["losses"]]
    assert faster["replica_fingerprints"] != first["replica_fingerprints"]  # the override did change the run
    kept = {name: yaml.safe_load((root / "results" / name / "config.yaml").read_text())
            for name in ("first", "faster")}
    assert (kept["first"]["max_steps"], kept["first"]["synthetic"], kept["first"]["export"]) == (10, True, False)
    assert kept["faster"] == {**kept["first"], "lr": 0.01, "results_dir": "results/faster"}


def test_saved_model_cli_shows_the_export_as_written(mnist_run):
    process, _, root = mnist_run
    assert_ok(process)
    shown = run(documented(SAVED_MODEL_CLI), cwd=root)
    assert_ok(shown)
    assert "serving_default" in shown.stdout


def test_tensorboard_serves_the_run_as_written(mnist_run, tmp_path):
    process, _, root = mnist_run
    assert_ok(process)
    # The documented command as it is: it picks a free port from 6006 up and says which on stderr.
    said = tmp_path / "tensorboard.log"
    with said.open("w") as log:
        server = subprocess.Popen(["bash", "-c", f"exec {documented(TENSORBOARD)}"], cwd=root, env=environment(),
                                  stdout=subprocess.DEVNULL, stderr=log)
    try:
        url, deadline = None, time.monotonic() + 120
        while url is None and time.monotonic() < deadline and server.poll() is None:
            found = re.search(r"(http://\S+?:\d+/)", said.read_text())
            url = found and found.group(1)
            time.sleep(0.5)
        assert url, said.read_text()
        tags = {}
        while "mnist-cnn/tensorboard/train" not in tags and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}data/plugin/scalars/tags", timeout=5) as reply:
                    tags = json.load(reply)
            except OSError:
                time.sleep(1)
        assert {"loss", "accuracy"} <= set(tags.get("mnist-cnn/tensorboard/train", {})), tags
    finally:
        server.terminate()
        server.wait(timeout=30)


# -- data commands ----------------------------------------------------------------------------------------

def fresh(*folders: str) -> list[pathlib.Path]:
    """The absolute folders a command writes that did not exist before it: removed after the test."""
    return [pathlib.Path(folder) for folder in folders if not os.path.exists(folder)]


def examples(index: pathlib.Path) -> int:
    return len(json.loads(index.read_text())["examples"])


def test_the_cityscapes_quick_start_fixture_is_made_and_prepared_as_written():
    made = fresh("/tmp/cs-release", "/tmp/cs-prepared")
    try:
        process = run(documented(
            "python recipes/cityscapes-unet/make_fixture.py --out /tmp/cs-release --zip --no-tree --train 8 --val 4",
            "python recipes/cityscapes-unet/prepare_data.py --source /tmp/cs-release --out /tmp/cs-prepared"), cwd=REPO)
        assert_ok(process)
        assert examples(pathlib.Path("/tmp/cs-prepared/train.json")) == 8
        assert examples(pathlib.Path("/tmp/cs-prepared/val.json")) == 4
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def test_the_cityscapes_synthetic_fixture_is_made_and_prepared_as_written():
    made = fresh("/tmp/cityscapes-fixture", "/tmp/cityscapes-prepared")
    try:
        process = run(documented(
            "python recipes/cityscapes-unet/make_fixture.py --out /tmp/cityscapes-fixture --zip",
            "python recipes/cityscapes-unet/prepare_data.py --source /tmp/cityscapes-fixture "
            "--out /tmp/cityscapes-prepared"), cwd=REPO)
        assert_ok(process)
        # The README: "The defaults are 6 train and 3 val pairs of 64x128."
        index = json.loads(pathlib.Path("/tmp/cityscapes-prepared/train.json").read_text())
        assert (len(index["examples"]), index["height"], index["width"]) == (6, 64, 128)
        assert examples(pathlib.Path("/tmp/cityscapes-prepared/val.json")) == 3
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def test_the_downloaded_cityscapes_zips_are_prepared_as_written(tmp_path):
    """`~/datasets/cityscapes` holds the two zips of the download page, here generated at full size
    (Cityscapes itself needs an account)."""
    home = tmp_path / "home"
    assert_ok(run(f"python recipes/cityscapes-unet/make_fixture.py --out {home}/datasets/cityscapes --zip --no-tree "
                  "--size 1024x2048 --train 1 --val 1", cwd=REPO))
    root = scratch(tmp_path)
    process = run(documented("python recipes/cityscapes-unet/prepare_data.py --source ~/datasets/cityscapes "
                             "--out data/cityscapes --expect-size 1024x2048"), cwd=root, home=home)
    assert_ok(process)
    index = json.loads((root / "data" / "cityscapes" / "train.json").read_text())
    assert (len(index["examples"]), index["height"], index["width"]) == (1, 1024, 2048)


def test_your_own_images_and_masks_are_prepared_as_written(tmp_path):
    """README.md's 'Use the trained model' and the cityscapes-unet README show the same line."""
    root = scratch(tmp_path)
    write_pairs(root / "data" / "my-scenes", count=10)
    process = run(documented(
        "python recipes/cityscapes-unet/prepare_data.py --format pairs --images data/my-scenes/images "
        "--masks data/my-scenes/masks --classes data/my-scenes/classes.yaml --out data/my-scenes-prepared"), cwd=root)
    assert_ok(process)
    prepared = root / "data" / "my-scenes-prepared"
    # --val-fraction's default 0.2 of the 10 flat pairs become val.
    assert (examples(prepared / "train.json"), examples(prepared / "val.json")) == (8, 2)


def test_the_generated_cassava_directory_is_written_as_written(tmp_path):
    root = scratch(tmp_path)
    process = run(documented("python recipes/cassava-resnet/generated_cassava.py build/cassava-tfds "
                             "--train 64 --validation 16"), cwd=root)
    assert_ok(process)
    info = json.loads((root / "build" / "cassava-tfds" / "cassava" / "0.1.0" / "dataset_info.json").read_text())
    counts = {split["name"]: int(sum(int(n) for n in split.get("shardLengths", []))) for split in info["splits"]}
    assert counts["train"] == 64 and counts["validation"] == 16, counts


