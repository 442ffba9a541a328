"""Unit tests of the sbatch script renderer (commands/slurm.py)."""
import re
import subprocess

import pytest

from commands.launch import LaunchError
from commands.slurm import render_sbatch


def directives(text):
    return [line.split(None, 1)[1] for line in text.splitlines() if line.startswith("#SBATCH")]


def srun_line(text):
    return next(line for line in text.splitlines() if line.startswith("srun"))


def test_horovod_in_apptainer_runs_one_rank_per_gpu_through_pmix():
    text = render_sbatch("cityscapes-unet", "horovod", nodes=2, gpus_per_node=8, train_args=["--amp"],
                         sif="/sif/c.sif", data_dir="/shared/cs")
    assert {"--nodes=2", "--ntasks-per-node=8", "--gpus-per-node=8"} <= set(directives(text))
    line = srun_line(text)
    assert line.startswith("srun --kill-on-bad-exit=1 --mpi=pmix apptainer exec --nv ")
    assert "--bind /shared/cs:/data:ro" in line and '--bind "$RESULTS":/results' in line
    assert "--cleanenv" not in line  # SLURM_* and PMIX_* must reach the tasks
    assert line.endswith("/sif/c.sif python recipes/cityscapes-unet/train.py --launcher horovod --amp "
                         "--resume --results-dir /results --data-dir /data || status=$?")


def test_multiworker_without_container_uses_the_checkout_or_the_recipe_folder():
    text = render_sbatch("mnist-cnn", "multiworker", nodes=2, gpus_per_node=0, tasks_per_node=2)
    assert "--ntasks-per-node=2" in directives(text)
    assert not any(d.startswith("--gpus-per-node") for d in directives(text))
    assert srun_line(text) == ('srun --kill-on-bad-exit=1 python "$RECIPE_DIR/train.py" --launcher multiworker '
                               '--resume --results-dir "$RESULTS" || status=$?')
    # Submitted from the checkout: recipes/mnist-cnn; from the recipe folder (a copy of it on its own): that folder.
    lines = text.splitlines()
    assert lines.index("RECIPE_DIR=recipes/mnist-cnn") < lines.index("if [ -f train.py ]; then RECIPE_DIR=.; fi") \
        < lines.index(srun_line(text))
    assert "PYTHONPATH" not in text  # the library is installed (tf_recipes), nothing is put on the path


def test_mirrored_is_one_task_on_one_node():
    text = render_sbatch("mnist-cnn", "mirrored", nodes=1, gpus_per_node=4)
    assert "--ntasks-per-node=1" in directives(text)
    with pytest.raises(LaunchError, match="runs on one node, not 2"):
        render_sbatch("mnist-cnn", "mirrored", nodes=2, gpus_per_node=4)


def test_script_is_valid_bash():
    text = render_sbatch("mnist-cnn", "horovod", nodes=3, gpus_per_node=8, partition="gpu", account="ml",
                         sif="a b.sif", train_args=["--epochs", "2"])
    assert {"--partition=gpu", "--account=ml"} <= set(directives(text))
    assert "'a b.sif'" in srun_line(text)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_pyxis_runs_each_task_in_the_image_with_the_same_mounts():
    text = render_sbatch("cityscapes-unet", "horovod", nodes=2, gpus_per_node=8, data_dir="/shared/cs",
                         container_image="nvcr.io#nvidia/tensorflow:25.02-tf2-py3")
    line = srun_line(text)
    assert line.startswith("srun --kill-on-bad-exit=1 --mpi=pmix "
                           "'--container-image=nvcr.io#nvidia/tensorflow:25.02-tf2-py3' ")
    assert ' --container-mounts="$RESULTS":/results,/shared/cs:/data:ro ' in line
    assert " --container-workdir=/workspace/tf-recipes python recipes/cityscapes-unet/train.py " in line
    assert "export PYTHONPATH" not in text  # the image has the library installed
    multiworker = srun_line(render_sbatch("mnist-cnn", "multiworker", nodes=2, gpus_per_node=4,
                                          container_image="/shared/sqsh/mnist-cnn_ngc.sqsh"))
    assert "--mpi" not in multiworker and "--container-mounts=\"$RESULTS\":/results " in multiworker
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    with pytest.raises(LaunchError, match="not both"):
        render_sbatch("mnist-cnn", "horovod", nodes=1, gpus_per_node=8, sif="a.sif", container_image="b")
    with pytest.raises(LaunchError, match="'/data,x'"):
        render_sbatch("mnist-cnn", "horovod", nodes=1, gpus_per_node=8, container_image="b", data_dir="/data,x")


def test_scripts_ask_for_an_early_signal_and_stop_all_tasks_on_a_failure():
    text = render_sbatch("mnist-cnn", "multiworker", nodes=2, gpus_per_node=4)
    assert "--signal=USR1@120" in directives(text)  # no "B:": the signal reaches the tasks
    assert "--signal=USR1@600" in directives(render_sbatch("mnist-cnn", "horovod", nodes=1, gpus_per_node=1,
                                                           signal_grace=600))
    assert "--requeue" not in directives(text) and "scontrol requeue" not in text
    assert all("--kill-on-bad-exit=1" in line for line in text.splitlines() if line.startswith("srun"))


def run_script_with_srun_status(tmp_path, text, status):
    """Run the script's shell logic with an srun that exits `status` and an scontrol that logs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("srun", f"exit {status}"), ("scontrol", f'echo "$@" >> {tmp_path}/scontrol.log')):
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "77"}
    process = subprocess.run(["bash", "-c", text], env=env, capture_output=True, text=True)
    log = tmp_path / "scontrol.log"
    return process, log.read_text() if log.exists() else ""


@pytest.mark.parametrize("status,requeued", [(143, True), (0, False), (2, False), (4, False)])
def test_requeue_puts_back_only_a_job_that_stopped_with_a_checkpoint(tmp_path, status, requeued):
    text = render_sbatch("mnist-cnn", "multiworker", nodes=1, gpus_per_node=0, tasks_per_node=2, requeue=True)
    assert "--requeue" in directives(text) and "--open-mode=append" in directives(text)
    process, scontrol = run_script_with_srun_status(tmp_path, text, status)
    # set -e must not end the script before the status is checked, and the job ends with srun's status.
    assert process.returncode == status, process.stderr
    assert scontrol == ("requeue 77\n" if requeued else "")
    # The results folder is keyed by the job id, which a requeued job keeps; train.py always resumes.
    assert (tmp_path / "results" / "mnist-cnn" / "slurm-77").is_dir()
    assert "--resume --results-dir" in srun_line(text)


def test_a_given_resume_is_not_doubled():
    line = srun_line(render_sbatch("mnist-cnn", "multiworker", nodes=1, gpus_per_node=1, train_args=["--resume"]))
    assert line.count("--resume") == 1


@pytest.mark.parametrize("time", ["30", "30:00", "04:00:00", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED"])
def test_every_time_format_sbatch_takes_is_accepted(time):
    assert f"--time={time}" in directives(render_sbatch("mnist-cnn", "horovod", nodes=1, gpus_per_node=1,
                                                        time=time))


@pytest.mark.parametrize("field,value,message", [
    ("time", "abc", "--time 'abc' is not a SLURM time"),
    ("time", "1:2:3:4", "--time '1:2:3:4'"),
    ("time", "1-", "--time '1-'"),
    ("time", "", "--time ''"),
    ("partition", "gpu large", "--partition 'gpu large'"),
    ("account", "my account", "--account 'my account'"),
    ("job_name", "my job", "--job-name 'my job'"),
    ("job_name", "x\n#SBATCH --exclusive", "--job-name"),
    ("signal_grace", 0, "--signal-grace 0"),
])
def test_fields_sbatch_would_reject_are_refused_naming_the_value(field, value, message):
    with pytest.raises(LaunchError, match=re.escape(message)):
        render_sbatch("mnist-cnn", "horovod", nodes=1, gpus_per_node=1, **{field: value})


def run_script_recording_srun(tmp_path, text, environ):
    """Run the script with an srun that logs its arguments and SRUN_CPUS_PER_TASK, one line a call."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text(f'#!/bin/bash\necho "cpus=${{SRUN_CPUS_PER_TASK-unset}} $*" >> {tmp_path}/srun.log\n')
    (bin_dir / "srun").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "77", **environ}
    process = subprocess.run(["bash", "-c", text], env=env, capture_output=True, text=True)
    assert process.returncode == 0, process.stderr
    return (tmp_path / "srun.log").read_text().splitlines()


@pytest.mark.parametrize("launcher,options", [
    ("multiworker", {}), ("horovod", {"sif": "/sif/m.sif"}), ("horovod", {"container_image": "nvcr.io#x/y:1"}),
    ("mirrored", {}),
])
def test_every_srun_step_gets_the_jobs_cpus_per_task(tmp_path, launcher, options):
    # Slurm 22.05 to 23.02 srun does not inherit --cpus-per-task: the script hands it over, to every step.
    text = render_sbatch("mnist-cnn", launcher, nodes=1, gpus_per_node=2, cpus_per_task=6, preflight=True, **options)
    assert "--cpus-per-task=6" in directives(text)
    lines = text.splitlines()
    export = lines.index('export SRUN_CPUS_PER_TASK="${SLURM_CPUS_PER_TASK:-6}"')
    assert export < min(i for i, line in enumerate(lines) if line.startswith("srun"))
    assert "--cpus-per-task" in lines[export - 2] + lines[export - 1]  # the comment says why
    # sbatch sets SLURM_CPUS_PER_TASK (also when `sbatch -c N` overrides the directive); both steps see it.
    calls = run_script_recording_srun(tmp_path, text, {"SLURM_CPUS_PER_TASK": "4"})
    assert len(calls) == 2 and all(call.startswith("cpus=4 --kill-on-bad-exit=1 ") for call in calls), calls
    assert "tf_recipes.operations.preflight" in calls[0] and "train.py" in calls[1]


def test_without_slurm_cpus_per_task_srun_gets_the_rendered_count(tmp_path):
    text = render_sbatch("mnist-cnn", "multiworker", nodes=2, gpus_per_node=0, cpus_per_task=3)
    assert run_script_recording_srun(tmp_path, text, {})[0].startswith("cpus=3 --kill-on-bad-exit=1 ")


def test_horovod_ranks_start_through_the_mpi_plugin_asked_for():
    assert srun_line(render_sbatch("mnist-cnn", "horovod", nodes=2, gpus_per_node=8)).startswith(
        "srun --kill-on-bad-exit=1 --mpi=pmix python ")
    text = render_sbatch("mnist-cnn", "horovod", nodes=2, gpus_per_node=8, mpi="pmi2", preflight=True)
    assert [line.split(" python ")[0] for line in text.splitlines() if line.startswith("srun")] == \
        ["srun --kill-on-bad-exit=1 --mpi=pmi2"] * 2  # the preflight step and training
    assert "srun --mpi=pmi2" in text  # the comment names it
    assert "--mpi" not in srun_line(render_sbatch("mnist-cnn", "multiworker", nodes=2, gpus_per_node=8, mpi="pmi2"))


@pytest.mark.parametrize("mpi", ["", "none", "pmix; rm -rf ~", "PMIx", "pmix v4"])
def test_an_mpi_plugin_name_srun_cannot_take_is_refused_naming_it(mpi):
    with pytest.raises(LaunchError, match=re.escape(f"--mpi {mpi!r} is not an srun MPI plugin")):
        render_sbatch("mnist-cnn", "horovod", nodes=2, gpus_per_node=8, mpi=mpi)


def test_invoke_sbatch_passes_the_mpi_plugin_and_refuses_a_name_that_is_none():
    from helpers import run_invoke

    rendered = run_invoke("sbatch", "mnist-cnn", "--mpi", "pmi2", "--dry", timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    assert 'srun --kill-on-bad-exit=1 --mpi=pmi2 python "$RECIPE_DIR/train.py" --launcher horovod' in \
        rendered.stdout
    refused = run_invoke("sbatch", "mnist-cnn", "--mpi", "pmix; rm -rf ~", "--dry", timeout=120)
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    assert len(refused.stderr.strip().splitlines()) == 1 and "--mpi" in refused.stderr, refused.stderr
