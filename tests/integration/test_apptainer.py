"""Apptainer for real: `invoke build mnist-cnn --base cpu --runtime apptainer` turns the recipe's Docker
image into a SIF (`docker save`, then `apptainer build SIF docker-archive:TAR`), and
`invoke run --runtime apptainer` trains inside it (multiworker, two processes), ending with the same
replica fingerprints as the same run under `--runtime docker` in the image the SIF was made from,
and writing its results as the caller; the SIF's sbatch script trains the same model on two SLURM
nodes. Every other launcher, and the other recipes, under Apptainer: the nightly cpu tier, whose
apptainer cells must end with their Docker cell's fingerprints bit for bit (`invoke nightly --tier cpu`,
docs/nightly.md).

On Debian 12, `bash ci/apptainer.sh` provides `apptainer` (ci/test.sh runs it first): Debian unstable's
Apptainer in a root file system of its own, run as an unprivileged user in user-namespace mode, the
caller's ids mapped onto that user. Without a working `apptainer` these tests fail under
TF_RECIPES_STRICT=1, saying so.

One SIF for the module, compressed with zstd (a third of gzip's build time), kept in build/sif and
keyed on the image's id: a later run with the same image rebuilds nothing (see
test_a_second_build_reuses_the_sif)."""
import json
import os
import shutil
import subprocess

import pytest

from docker_images import BUILD_TIMEOUT, docker
from helpers import REPO, assert_ok, made_once, read_results, run_invoke

pytestmark = [pytest.mark.docker, pytest.mark.slow]
SIF = REPO / "build" / "sif" / "mnist-cnn_cpu.sif"
BUILD = ["build", "mnist-cnn", "--base", "cpu", "--runtime", "apptainer", "--sif-compression", "zstd"]
RUNS = {"multiworker": ["--launcher", "multiworker", "--cpu-replicas", "2"]}
TRAIN = ["--synthetic", "--max-steps", "10", "--log-every", "5", "--batch-size", "32"]
FINGERPRINTS = {}  # launcher -> the Docker run's replica fingerprints, for the SLURM job below


def missing(message):
    if os.environ.get("TF_RECIPES_STRICT") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def apptainer():
    found = shutil.which("apptainer")
    version = subprocess.run([found, "version"], capture_output=True, text=True) if found else None
    if version is None or version.returncode != 0:
        why = "is not on PATH" if found is None else f"does not run ({(version.stderr or version.stdout).strip()})"
        missing(f"apptainer {why}: run `bash ci/apptainer.sh` (as root; on Debian 12 it installs Debian "
                "unstable's Apptainer in a root file system of its own)")
    return version.stdout.strip()


@pytest.fixture(scope="module")
def sif(apptainer, mnist_image):
    """The SIF of tf-recipes/mnist-cnn:cpu (the Docker image is built first, so this build finds it in the
    engine's cache)."""
    with made_once("sif-mnist-cnn"):
        process = run_invoke(*BUILD, timeout=BUILD_TIMEOUT)
    assert_ok(process)
    assert SIF.is_file(), process.stdout[-3000:]
    return process


def test_a_second_build_reuses_the_sif(sif):
    made = SIF.stat().st_mtime_ns
    again = run_invoke(*BUILD, timeout=BUILD_TIMEOUT)
    assert_ok(again)
    assert "build/sif/mnist-cnn_cpu.sif is up to date: made from tf-recipes/mnist-cnn:cpu" in again.stdout
    assert "apptainer build" not in again.stdout and "docker save" not in again.stdout
    assert SIF.stat().st_mtime_ns == made
    image_id = docker("image", "inspect", "-f", "{{.Id}}", "tf-recipes/mnist-cnn:cpu").stdout.strip()
    stamp = json.loads(SIF.with_name(SIF.name + ".json").read_text())
    assert stamp == {"image": "tf-recipes/mnist-cnn:cpu", "image_id": image_id, "compression": "zstd"}
    # Nothing of the build is left beside the SIF: no tarball, no half-built SIF.
    assert not [path.name for path in SIF.parent.iterdir() if path.name.startswith(f".{SIF.name}.")]


def test_a_missing_sif_says_which_command_builds_it(apptainer, tmp_path):
    process = run_invoke("run", "mnist-cnn", "--runtime", "apptainer", "--gpus", "0", "--results-dir",
                         str(tmp_path / "results"), "--", *TRAIN, env={"INVOKE_TF_RECIPES_SIF_DIR": str(tmp_path)})
    assert process.returncode == 2, process.stdout + process.stderr
    assert process.stderr.strip() == (f"error: SIF {tmp_path}/mnist-cnn_cpu.sif is not built; run `invoke build "
                                      "mnist-cnn --stack ngc-25.02 --base cpu --runtime apptainer` first")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("name", list(RUNS))
def test_apptainer_trains_like_docker(sif, engine, tmp_path, name):
    """The same `invoke run` under --runtime apptainer and --runtime docker: the same fingerprints."""
    runs = {}
    for runtime in ("apptainer", "docker"):
        results_dir = tmp_path / runtime
        process = run_invoke("run", "mnist-cnn", "--gpus", "0", *RUNS[name], "--runtime", runtime, "--base", "cpu",
                             "--results-dir", str(results_dir), "--", *TRAIN, env=engine)
        assert_ok(process)
        runs[runtime] = (process, read_results(results_dir))
    process, results = runs["apptainer"]
    command = next(line for line in process.stdout.splitlines() if line.startswith("+ "))
    assert command.startswith("+ apptainer exec --cleanenv ") and " --nv " not in command, command
    assert f"--bind {tmp_path / 'apptainer'}:/results " in command and f" build/sif/{SIF.name} " in command
    # train.py ran inside: it saw the results folder at /results.
    assert "results: /results/results.json" in process.stdout
    assert f"results on this machine: {tmp_path / 'apptainer' / 'results.json'}" in process.stdout
    assert results["launcher"] == name and results["replicas"] == (1 if name == "single" else 2)
    assert len(set(results["replica_fingerprints"])) == 1
    docker_results = runs["docker"][1]
    print(f"{name}: apptainer {results['replica_fingerprints']}, docker {docker_results['replica_fingerprints']}")
    assert results["replica_fingerprints"] == docker_results["replica_fingerprints"]
    assert [e["loss"] for e in results["losses"]] == [e["loss"] for e in docker_results["losses"]]
    FINGERPRINTS[name] = docker_results["replica_fingerprints"]
    # What the job wrote is the caller's, as when a user runs apptainer in a folder they own.
    for path in (tmp_path / "apptainer").rglob("*"):
        assert path.stat().st_uid == os.getuid(), path


@pytest.mark.full  # the night's: every push runs the SIF (above) and one two-node job (test_slurm_cluster.py)
def test_the_rendered_apptainer_sbatch_script_trains_on_two_nodes_like_docker(sif, engine, tmp_path):
    """`invoke sbatch --sif` on the two-node cluster (ci/slurm-cluster.sh): one multiworker task per
    node, each `srun ... apptainer exec SIF python train.py`, ends with the Docker run's weights. Each
    task may use 2 CPUs, as each process of `invoke run` here may (TensorFlow splits its sums by
    the CPUs it may use)."""
    from test_slurm_cluster import require_cluster, submit_script

    require_cluster(2)  # fails under TF_RECIPES_STRICT=1, saying how to start the cluster
    if "multiworker" not in FINGERPRINTS:  # run alone: make the Docker reference here
        reference = tmp_path / "docker"
        assert_ok(run_invoke("run", "mnist-cnn", "--gpus", "0", *RUNS["multiworker"], "--runtime", "docker", "--base",
                             "cpu", "--results-dir", str(reference), "--", *TRAIN, env=engine))
        FINGERPRINTS["multiworker"] = read_results(reference)["replica_fingerprints"]
    script = tmp_path / "job.sbatch"
    assert_ok(run_invoke("sbatch", "mnist-cnn", "--launcher", "multiworker", "--nodes", "2", "--gpus-per-node", "0",
                         "--tasks-per-node", "1", "--cpus-per-task", "2", "--sif", f"build/sif/{SIF.name}",
                         "--out", str(script), "--", *TRAIN))
    text = script.read_text()
    assert "srun --kill-on-bad-exit=1 apptainer exec --bind \"$RESULTS\":/results " in text, text
    job = submit_script(script)
    try:
        job.wait()
        assert (job.state, job.exit_code) == ("COMPLETED", 0), job.describe()
        results = read_results(job.results)
        assert (results["launcher"], results["nodes"], results["replicas"]) == ("multiworker", 2, 2), results
        assert results["replica_fingerprints"] == FINGERPRINTS["multiworker"], job.describe()
        assert "0: results: /results/results.json" in job.log(), job.describe()
    finally:
        job.remove_files()
