"""Unit tests of the sbatch script renderer (commands/slurm.py)."""
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
    assert line.startswith("srun --mpi=pmix apptainer exec --nv ")
    assert "--bind /shared/cs:/data:ro" in line and '--bind "$RESULTS":/results' in line
    assert "--cleanenv" not in line  # SLURM_* and PMIX_* must reach the tasks
    assert line.endswith("/sif/c.sif python recipes/cityscapes-unet/train.py --launcher horovod --amp "
                         "--results-dir /results --data-dir /data")


def test_multiworker_without_container_uses_the_checkout():
    text = render_sbatch("mnist-cnn", "multiworker", nodes=2, gpus_per_node=0, tasks_per_node=2)
    assert "--ntasks-per-node=2" in directives(text)
    assert not any(d.startswith("--gpus-per-node") for d in directives(text))
    assert srun_line(text) == 'srun python recipes/mnist-cnn/train.py --launcher multiworker --results-dir "$RESULTS"'
    assert 'export PYTHONPATH="$PWD' in text


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
