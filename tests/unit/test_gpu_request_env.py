"""Every launcher tells each training process how many GPUs it must see (GPUS_PER_PROCESS_ENV)."""
from commands.k8s import build_manifests
from commands.launch import build_launch
from commands.slurm import render_sbatch
from tf_recipes.contract import GPUS_PER_PROCESS_ENV
from tf_recipes.operations.spawn import worker_environments


def _env_of(manifests):
    return [e for doc in manifests for e in str(doc).split("{'name': ") if e.startswith(f"'{GPUS_PER_PROCESS_ENV}'")]


def test_launch_plans_ask_each_process_for_its_share():
    assert build_launch("mnist-cnn", "mirrored", gpus=2).env[GPUS_PER_PROCESS_ENV] == "2"
    assert build_launch("mnist-cnn", "horovod", gpus=2).env[GPUS_PER_PROCESS_ENV] == "1"
    assert build_launch("mnist-cnn", "multiworker", gpus=2).env[GPUS_PER_PROCESS_ENV] == "1"
    assert build_launch("mnist-cnn", "single", gpus=0).env[GPUS_PER_PROCESS_ENV] == "0"


def test_spawn_gives_each_worker_its_gpus():
    envs = worker_environments(2, [1, 2], gpus_per_worker=3)
    assert [env[GPUS_PER_PROCESS_ENV] for env in envs] == ["3", "3"]
    assert GPUS_PER_PROCESS_ENV not in worker_environments(2, [1, 2])[0]


def test_sbatch_exports_the_share_of_each_task():
    assert f"export {GPUS_PER_PROCESS_ENV}=1\n" in render_sbatch("mnist-cnn", "horovod", nodes=2, gpus_per_node=8)
    assert f"export {GPUS_PER_PROCESS_ENV}=8\n" in render_sbatch("mnist-cnn", "mirrored", nodes=1, gpus_per_node=8)


def test_k8s_manifests_set_it_from_the_gpu_limit():
    for kind, value in (("tfjob", "4"), ("job", "4"), ("mpijob", "1")):
        envs = _env_of(build_manifests("mnist-cnn", kind=kind, workers=2, gpus_per_worker=4,
                                           image="tf-recipes/mnist-cnn:ngc"))
        assert envs and all(f"'value': '{value}'" in e for e in envs), (kind, envs)
