"""Paths a careless user hands the project: what a folder reader takes and names (common/tf_recipes/user_paths.py),
outputs on inputs, a file where a folder was expected (and the reverse), paths another program's syntax
cannot hold, values another program would check later, and tasks on a fresh clone. Every case that
could block on a FIFO runs in a subprocess with a timeout, so a reader that blocks fails the test."""
import os
import socket
import subprocess
import sys

import pytest

from error_checks import assert_one_error_line
from helpers import REPO, run_invoke, run_python


# -- the folder reader ---------------------------------------------------------------------------------

@pytest.fixture
def odd_folder(tmp_path):
    """A folder of one photo, a link to it, a FIFO, a socket and a dangling link, all named like photos."""
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"\x89PNG")
    (folder / "b.png").symlink_to(folder / "a.png")
    os.mkfifo(folder / "c.png")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "d.png"))
    (folder / "e.png").symlink_to(tmp_path / "gone.png")
    yield folder
    server.close()


def test_the_reader_takes_regular_files_and_links_to_them_and_names_the_rest(odd_folder):
    code = ("import sys; from tf_recipes import user_paths; listing = user_paths.list_files(sys.argv[1])\n"
            "print(listing.files); print(listing.others)")
    process = run_python("-c", code, str(odd_folder), timeout=60, env={"PYTHONPATH": str(REPO)})
    files, others = process.stdout.splitlines()
    assert files == repr([str(odd_folder / "a.png"), str(odd_folder / "b.png")])
    assert others == repr([(str(odd_folder / "c.png"), "a named pipe (FIFO)"), (str(odd_folder / "d.png"), "a socket"),
                           (str(odd_folder / "e.png"), "a dangling symbolic link")])


def test_an_image_folder_for_training_names_a_fifo_among_the_photos(tmp_path):
    for split in ("train", "val"):
        (tmp_path / split / "cats").mkdir(parents=True)
        (tmp_path / split / "cats" / "a.jpg").write_bytes(b"\xff\xd8")
    os.mkfifo(tmp_path / "train" / "cats" / "b.jpg")
    code = ("import sys; from tf_recipes import image_folder\n"
            "try:\n    image_folder.read_image_folder(sys.argv[1])\nexcept image_folder.DataError as error:\n"
            "    print(error)")
    process = run_python("-c", code, str(tmp_path), timeout=60, env={"PYTHONPATH": str(REPO)})
    assert f"{tmp_path}/train/cats/b.jpg is a named pipe (FIFO), not a regular file" in process.stdout, process.stderr


def test_the_nightly_history_leaves_out_a_fifo_without_waiting_on_it(tmp_path):
    os.mkfifo(tmp_path / "2026-11-25.json")
    code = "import sys; from ci.nightly import runner; print(runner.read_history(sys.argv[1]))"
    process = run_python("-c", code, str(tmp_path), timeout=60, env={"PYTHONPATH": str(REPO)})
    assert process.stdout.splitlines()[-1] == "[]", process.stderr
    assert "2026-11-25.json is a named pipe (FIFO), not a regular file" in process.stdout


# -- outputs on inputs, folders and files --------------------------------------------------------------

def test_a_results_dir_that_is_a_file_is_one_line(tmp_path):
    """Not --dry: the results folder is made just before the run starts."""
    results = tmp_path / "results.txt"
    results.write_text("mine\n")
    process = run_invoke("run", "mnist-cnn", "--runtime", "local", "--results-dir", str(results), "--",
                         "--synthetic", "--max-steps", "1", timeout=120)
    assert_one_error_line(process, f"--results-dir {results} is a file, not a folder")
    assert results.read_text() == "mine\n"


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_invoke_run_refuses_a_results_dir_on_the_data(tmp_path, where):
    data = tmp_path / "data"
    data.mkdir()
    results = {"same": data, "inside": data / "results", "around": tmp_path}[where]
    process = run_invoke("run", "mnist-cnn", "--runtime", "local", "--data-dir", str(data), "--results-dir",
                         str(results), "--dry", timeout=120)
    assert_one_error_line(process, f"--results-dir {results}", f"--data-dir {data}")


@pytest.mark.parametrize("flags,needle", [
    (["--data-dir", "{data}", "--results-dir", "{data}/run"], "--results-dir {data}/run lies inside --data-dir"),
    (["--data-dir", "{data}/photos.txt"], "--data-dir {data}/photos.txt is a file, not a folder"),
    (["--results-dir", "{data}/photos.txt/run"],
     "--results-dir {data}/photos.txt/run cannot be made: {data}/photos.txt is a file"),
], ids=["results-in-data", "data-is-a-file", "results-under-a-file"])
def test_a_train_script_refuses_folder_flags_before_it_loads_tensorflow(tmp_path, flags, needle):
    data = tmp_path / "data"
    data.mkdir()
    (data / "photos.txt").write_text("")
    process = run_python("recipes/mnist-cnn/train.py", *(flag.format(data=data) for flag in flags),
                         "--synthetic", "--max-steps", "1", "--no-export", timeout=120)
    assert_one_error_line(process, needle.format(data=data))
    assert sorted(os.listdir(data)) == ["photos.txt"]


def test_the_cache_of_cassava_stays_out_of_the_data(tmp_path):
    from tf_recipes import cli

    args = type("Args", (), {"data_dir": str(tmp_path), "results_dir": None, "cache_dir": str(tmp_path / "cache")})
    assert f"--cache-dir {tmp_path}/cache lies inside --data-dir {tmp_path}" in cli.folder_flags_problem(args)


def test_cassava_refuses_a_default_cache_that_cannot_be_made_before_it_loads_tensorflow(tmp_path):
    process = run_python("recipes/cassava-resnet/train.py", "--data-dir", str(tmp_path), "--weights", "none",
                         timeout=120, env={"XDG_CACHE_HOME": "/proc/none"})
    assert_one_error_line(process, "the decode cache (the default of --cache-dir) /proc/none/tf-recipes/cassava-resnet "
                                   "cannot be made")


def test_predict_refuses_an_out_inside_the_model_before_loading_it(tmp_path):
    from tf_recipes.operations import predicting

    version = tmp_path / "export" / "1"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    (tmp_path / "photo.png").write_bytes(b"\x89PNG")
    args = predicting.parser("predict").parse_args(["--model", str(tmp_path / "export"), "--input",
                                                    str(tmp_path / "photo.png"), "--out", str(version / "preds")])
    with pytest.raises(predicting.PredictError, match=r"--out \S+/export/1/preds lies inside --model \S+/export"):
        predicting.run(args, "classification")
    assert sorted(os.listdir(version)) == ["saved_model.pb"]


# -- folders the project creates for a user: made with their parents, or one line before any work -------

# A folder that cannot be made, even by root: /proc takes no new folder.
UNMAKEABLE = "/proc/none/r"


@pytest.mark.parametrize("where", ["under-proc", "under-a-file"])
def test_invoke_run_says_in_one_line_that_the_results_folder_cannot_be_made(tmp_path, where):
    (tmp_path / "notes.txt").write_text("mine\n")
    results = {"under-proc": UNMAKEABLE, "under-a-file": f"{tmp_path}/notes.txt/r"}[where]
    process = run_invoke("run", "mnist-cnn", "--gpus", "0", "--runtime", "local", "--results-dir", results, "--",
                         "--synthetic", "--max-steps", "2", timeout=120)
    assert_one_error_line(process, f"--results-dir {results} cannot be made")
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_a_dry_run_notes_a_results_folder_that_cannot_be_made_here():
    """--dry makes nothing, and its commands may be meant for another machine: a note, not a refusal."""
    process = run_invoke("run", "mnist-cnn", "--runtime", "local", "--results-dir", UNMAKEABLE, "--dry", timeout=120)
    assert process.returncode == 0, process.stderr
    assert f"note: --results-dir {UNMAKEABLE} cannot be made" in process.stderr


def test_a_folder_that_can_be_made_is_checked_without_leaving_it_behind(tmp_path):
    from tf_recipes import user_paths

    assert user_paths.creatable_problem("--results-dir", str(tmp_path / "a" / "b")) is None
    assert os.listdir(tmp_path) == []
    assert user_paths.make_folder("--results-dir", str(tmp_path / "a" / "b")) is None
    assert (tmp_path / "a" / "b").is_dir()


@pytest.mark.parametrize("command", [
    ["-m", "tf_recipes.operations.preflight", "--results-dir", UNMAKEABLE],
    ["recipes/mnist-cnn/predict.py", "--model", "{tmp}/export", "--input", "{tmp}/photo.png", "--out", UNMAKEABLE],
    ["recipes/cityscapes-unet/make_fixture.py", "--out", UNMAKEABLE],
    ["recipes/cassava-resnet/download_cassava.py", "--data-dir", UNMAKEABLE],
    ["recipes/cassava-resnet/generated_cassava.py", UNMAKEABLE],
], ids=["preflight", "predict", "make-fixture", "download-cassava", "generated-cassava"])
def test_a_library_command_or_script_says_its_output_folder_cannot_be_made(tmp_path, command):
    (tmp_path / "photo.png").write_bytes(b"\x89PNG")
    process = run_python(*(arg.format(tmp=tmp_path) for arg in command), timeout=120)
    assert_one_error_line(process, f"{UNMAKEABLE} cannot be made")


@pytest.mark.parametrize("args", [
    ["sbatch", "mnist-cnn", "--out", f"{UNMAKEABLE}/job.sbatch"],
    ["images.bootstrap", "--rootfs", UNMAKEABLE],
    ["bench", "mnist-cnn", "--out", UNMAKEABLE],
], ids=["sbatch-out", "bootstrap-rootfs", "bench-out"])
def test_a_task_says_its_output_folder_cannot_be_made_before_it_starts(args):
    assert_one_error_line(run_invoke(*args, timeout=120), f"{UNMAKEABLE} cannot be made")


@pytest.mark.parametrize("task", ["sbatch", "k8s"])
def test_a_rendered_files_out_that_is_a_folder_is_one_line(tmp_path, task):
    assert_one_error_line(run_invoke(task, "mnist-cnn", "--out", str(tmp_path), timeout=120),
                    f"--out {tmp_path} is a folder, not a file")


def test_a_rendered_files_out_that_is_a_fifo_is_one_line_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "job.sbatch")
    assert_one_error_line(run_invoke("sbatch", "mnist-cnn", "--out", str(tmp_path / "job.sbatch"), timeout=60),
                    "is a named pipe (FIFO), not a file")


def test_invoke_bench_refuses_an_out_that_is_a_file(tmp_path):
    out = tmp_path / "bench.md"
    out.write_text("mine\n")
    assert_one_error_line(run_invoke("bench", "mnist-cnn", "--out", str(out), "--dry", timeout=120),
                          f"--out {out} is a file, not a folder")


def test_invoke_nightly_refuses_an_out_inside_its_history_and_a_matrix_that_is_a_fifo(tmp_path):
    assert_one_error_line(run_invoke("nightly", "--history", str(tmp_path), "--out", str(tmp_path / "out"), "--dry",
                                     timeout=120), f"--out {tmp_path / 'out'} lies inside --history {tmp_path}")
    os.mkfifo(tmp_path / "matrix.yaml")
    assert_one_error_line(run_invoke("nightly", "--matrix", str(tmp_path / "matrix.yaml"), "--dry", timeout=60),
                          "--matrix", "is a named pipe (FIFO), not a file")


def test_preflight_refuses_a_results_dir_that_is_a_file(tmp_path):
    results = tmp_path / "preflight.txt"
    results.write_text("")
    assert_one_error_line(run_python("-m", "tf_recipes.operations.preflight", "--results-dir", str(results),
                                     timeout=60), f"--results-dir {results} is a file, not a folder")


def test_a_ca_bundle_that_is_a_fifo_is_named_and_never_read(tmp_path):
    os.mkfifo(tmp_path / "ca.crt")
    assert_one_error_line(run_invoke("build", "mnist-cnn", "--ca-bundle", str(tmp_path / "ca.crt"), "--dry",
                                     timeout=60), f"CA bundle {tmp_path}/ca.crt is a named pipe (FIFO)")


# -- tasks on a fresh clone, before any build folder exists ---------------------------------------------

def test_a_rendered_file_goes_into_a_folder_that_does_not_exist_yet(tmp_path):
    out = tmp_path / "build" / "slurm" / "job.sbatch"
    process = run_invoke("sbatch", "mnist-cnn", "--out", str(out), timeout=120)
    assert process.returncode == 0, process.stderr
    assert out.read_text().startswith("#!/bin/bash\n")


def test_a_definition_is_written_before_the_sif_folder_exists(tmp_path):
    sif_dir = tmp_path / "build" / "sif"
    process = run_invoke("build", "mnist-cnn", "--base", "cpu", "--runtime", "apptainer", "--definition",
                         env={"INVOKE_TF_RECIPES_SIF_DIR": str(sif_dir),
                              "INVOKE_TF_RECIPES_APPTAINER": "no-apptainer-here"}, timeout=120)
    assert_one_error_line(process, "no-apptainer-here is not installed")
    assert (sif_dir / "mnist-cnn_cpu.def").is_file()


# -- paths put into another program's syntax ------------------------------------------------------------

@pytest.mark.parametrize("runtime,flag,name", [
    ("docker", "--results-dir", "run,1"), ("docker", "--data-dir", 'say "cheese"'),
    ("apptainer", "--data-dir", "data:v2"), ("apptainer", "--results-dir", "run,1"),
])
def test_a_mount_path_the_container_cannot_take_is_one_line(tmp_path, runtime, flag, name):
    path = tmp_path / name
    path.mkdir()
    process = run_invoke("run", "mnist-cnn", "--runtime", runtime, flag, str(path), "--dry", timeout=120)
    assert_one_error_line(process, f"{flag} {str(path)!r} contains", "bind mount")


def test_slurm_refuses_a_data_dir_an_apptainer_bind_cannot_hold():
    from commands.launch import LaunchError
    from commands.slurm import render_sbatch

    with pytest.raises(LaunchError, match=r"--data-dir '/srv/data:v2' contains :"):
        render_sbatch("mnist-cnn", "horovod", nodes=1, gpus_per_node=8, sif="mnist.sif", data_dir="/srv/data:v2")


def test_a_ca_bundle_path_with_a_comma_is_one_line(tmp_path):
    bundle = tmp_path / "ca,site.crt"
    bundle.write_text("")
    assert_one_error_line(run_invoke("build", "mnist-cnn", "--ca-bundle", str(bundle), "--dry", timeout=120),
                    f"--ca-bundle {str(bundle)!r} contains a comma")


# -- values another program checks later ----------------------------------------------------------------

@pytest.mark.parametrize("mpi", ["pmix3", "pmi", "openmpi"])
def test_srun_mpi_plugins_are_checked_when_given(mpi):
    assert_one_error_line(run_invoke("sbatch", "mnist-cnn", "--mpi", mpi, "--dry", timeout=120),
                    f"--mpi {mpi!r} is not an srun MPI plugin", "pmix, pmix_v2")


def test_an_image_name_docker_would_refuse_is_one_line():
    assert_one_error_line(run_invoke("run", "mnist-cnn", "--runtime", "docker", "--image", "my image", "--dry",
                                     timeout=120), "image 'my image' contains whitespace")


def test_tools_spawn_refuses_a_host_name_tf_config_cannot_hold():
    process = run_python("-m", "tf_recipes.operations.spawn", "--nproc", "1", "--hosts", "node1:4", "--", "true",
                         timeout=60)
    assert process.returncode == 2 and "--hosts: 'node1:4' is not a host name" in process.stderr, process.stderr


@pytest.mark.parametrize("program", ["/nonexistent/python", "no-such-program", "/etc/hostname"])  # the last: no program
def test_spawn_names_a_worker_command_that_cannot_start_in_one_line(program):
    process = run_python("-m", "tf_recipes.operations.spawn", "--nproc", "2", "--", program, "x.py", timeout=60)
    assert_one_error_line(process, f"the worker command {program} ")


def test_the_constraints_command_answers_in_one_line_and_has_help():
    assert_one_error_line(run_python("-m", "tf_recipes.operations.constraints", "ngc-2502", timeout=60), "'ngc-2502'",
                          "ngc-25.02")
    assert_one_error_line(run_python("-m", "tf_recipes.operations.constraints", timeout=60), "give one stack")
    helped = run_python("-m", "tf_recipes.operations.constraints", "--help", timeout=60)
    assert helped.returncode == 0
    assert helped.stdout.startswith("usage: python -m tf_recipes.operations.constraints STACK")


@pytest.mark.parametrize("hosts", ["node1:4,node2", "node1,node 2"])
def test_host_names_that_horovodrun_or_tf_config_cannot_hold_are_refused(hosts):
    assert_one_error_line(run_invoke("run", "mnist-cnn", "--runtime", "local", "--cpu-replicas", "2", "--launcher",
                               "multiworker", "--hosts", hosts, "--dry", timeout=120), "--hosts: ")


def test_nothing_here_blocks_on_a_fifo_given_as_the_input_of_predict(tmp_path):
    os.mkfifo(tmp_path / "photo.png")
    process = subprocess.run([sys.executable, "recipes/mnist-cnn/predict.py", "--model", str(tmp_path / "none"),
                              "--input", str(tmp_path / "photo.png"), "--out", str(tmp_path / "out")], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    assert_one_error_line(process, f"--input {tmp_path}/photo.png: a named pipe (FIFO)")
