"""Unit tests of the pure launcher command builders (nothing is run)."""
import json
import re

import pytest

from commands.launch import LaunchError, build_launch, container_name, parse_count
from tf_recipes.cluster import build_tf_config, check_tf_config
from tf_recipes.contract import UserError
from tf_recipes.operations.spawn import worker_environments

TRAIN = ["python", "recipes/mnist-cnn/train.py"]


def test_single_runs_the_script_directly_on_the_cpu():
    plan = build_launch("mnist-cnn", "single", train_args=["--max-steps", "5"])
    assert plan.argv == TRAIN + ["--launcher", "single", "--max-steps", "5"]
    assert plan.env["CUDA_VISIBLE_DEVICES"] == ""
    assert plan.replicas == 1


def test_mirrored_on_cpu_asks_for_logical_devices_and_on_gpus_uses_them_all():
    assert build_launch("mnist-cnn", "mirrored", cpu_replicas=2).argv[-2:] == ["--cpu-replicas", "2"]
    plan = build_launch("mnist-cnn", "mirrored", gpus=8)
    assert "--cpu-replicas" not in plan.argv
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert plan.replicas == 8


def test_multiworker_spawns_one_process_per_replica():
    plan = build_launch("mnist-cnn", "multiworker", cpu_replicas=3)
    assert plan.argv[:6] == ["python", "-m", "tf_recipes.operations.spawn", "--nproc", "3", "--"]
    assert plan.argv[6:] == TRAIN + ["--launcher", "multiworker"]
    gpu_plan = build_launch("mnist-cnn", "multiworker", gpus=4)
    assert gpu_plan.argv[3:7] == ["--nproc", "4", "--gpus-per-worker", "1"]


def test_horovod_through_horovodrun_and_mpirun():
    plan = build_launch("mnist-cnn", "horovod", cpu_replicas=2)
    assert plan.argv[:6] == ["horovodrun", "-np", "2", "-H", "localhost:2", "--gloo"]
    assert plan.argv[6:] == TRAIN + ["--launcher", "horovod"]
    gpu = build_launch("mnist-cnn", "horovod", gpus=8)
    assert "--gloo" not in gpu.argv and gpu.argv[1:3] == ["-np", "8"]
    mpi = build_launch("mnist-cnn", "horovod", cpu_replicas=2, horovod_runner="mpirun")
    assert mpi.argv[:3] == ["mpirun", "-np", "2"]
    exported = {mpi.argv[i + 1] for i, arg in enumerate(mpi.argv) if arg == "-x"}
    assert {"CUDA_VISIBLE_DEVICES", "PATH", "PYTHONPATH"} <= exported
    assert mpi.argv[-2:] == ["--launcher", "horovod"]


@pytest.mark.parametrize("kwargs,message", [
    (dict(launcher="single", cpu_replicas=2), "single runs one replica"),
    (dict(launcher="mirrored", gpus=2, cpu_replicas=2), "applies only with --gpus 0"),
    (dict(launcher="tpu"), "unknown launcher 'tpu'; choose one of: single, mirrored"),
    (dict(launcher="horovod", horovod_runner="srunx"), "unknown horovod runner 'srunx'"),
    (dict(launcher="mirrored", gpus=-1), "--gpus -1"),
])
def test_impossible_requests_name_the_value(kwargs, message):
    launcher = kwargs.pop("launcher")
    with pytest.raises(LaunchError, match=message.replace("(", r"\(")):
        build_launch("mnist-cnn", launcher, **kwargs)


def test_parse_count():
    assert parse_count("--gpus", "8") == 8
    with pytest.raises(LaunchError, match="'eight' is not a whole number"):
        parse_count("--gpus", "eight")


def test_tf_config_gives_each_worker_its_index_and_the_whole_cluster():
    envs = worker_environments(2, [1111, 2222])
    configs = [json.loads(env["TF_CONFIG"]) for env in envs]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert all(c["cluster"] == {"worker": ["localhost:1111", "localhost:2222"]} for c in configs)
    assert "CUDA_VISIBLE_DEVICES" not in envs[0]
    gpu_envs = worker_environments(2, [1, 2], gpus_per_worker=2)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in gpu_envs] == ["0,1", "2,3"]
    assert json.loads(build_tf_config(["h:1"], 0))["task"]["index"] == 0


def test_nsys_wraps_each_training_process_inside_the_launcher():
    plan = build_launch("cityscapes-unet", "horovod", gpus=8, nsys_output="/results")
    nsys = plan.argv.index("nsys")
    assert plan.argv[:nsys] == ["horovodrun", "-np", "8", "-H", "localhost:8"]
    assert plan.argv[nsys:nsys + 2] == ["nsys", "profile"]
    assert "/results/nsys-horovod-%p" in plan.argv
    assert plan.argv[-3:] == ["recipes/cityscapes-unet/train.py", "--launcher", "horovod"]


def test_multiworker_across_hosts_gives_every_node_the_same_cluster():
    plans = [build_launch("mnist-cnn", "multiworker", gpus=8, hosts=["n1", "n2"], node_index=i, port_base=3000)
             for i in (0, 1)]
    for index, plan in enumerate(plans):
        assert plan.replicas == 16
        assert plan.argv[3:13] == ["--nproc", "8", "--gpus-per-worker", "1", "--hosts", "n1,n2",
                                   "--node-index", str(index), "--port-base", "3000"]
    envs = [worker_environments(8, list(range(3000, 3008)), 1, ["n1", "n2"], node) for node in (0, 1)]
    tasks = [json.loads(env["TF_CONFIG"])["task"]["index"] for node in envs for env in node]
    assert tasks == list(range(16))
    cluster = json.loads(envs[1][0]["TF_CONFIG"])["cluster"]["worker"]
    assert cluster[0] == "n1:3000" and cluster[8] == "n2:3000" and len(cluster) == 16
    assert [env["CUDA_VISIBLE_DEVICES"] for env in envs[1]][:2] == ["0", "1"]


def test_horovod_across_hosts_lists_the_slots_of_every_host():
    plan = build_launch("mnist-cnn", "horovod", gpus=8, hosts=["n1", "n2"])
    assert plan.argv[:5] == ["horovodrun", "-np", "16", "-H", "n1:8,n2:8"]
    mpi = build_launch("mnist-cnn", "horovod", gpus=4, hosts=["a", "b", "c"], horovod_runner="mpirun")
    assert mpi.argv[1:3] == ["-np", "12"] and "a:4,b:4,c:4" in mpi.argv
    with pytest.raises(LaunchError, match="runs on one node"):
        build_launch("mnist-cnn", "mirrored", gpus=8, hosts=["n1", "n2"])
    with pytest.raises(LaunchError, match="--node-index 2 is not a position"):
        build_launch("mnist-cnn", "multiworker", gpus=8, hosts=["n1", "n2"], node_index=2)


def test_horovod_over_a_hostfile_as_the_mpi_operator_writes_it():
    plan = build_launch("mnist-cnn", "horovod", gpus=8, horovod_runner="mpirun", hostfile="/etc/mpi/hostfile",
                        hostfile_nodes=3, ssh_options=["-o", "StrictHostKeyChecking=no"])
    argv = plan.argv
    assert argv[:3] == ["mpirun", "-np", "24"] and argv[argv.index("--hostfile") + 1] == "/etc/mpi/hostfile"
    assert argv[argv.index("plm_rsh_args") + 1] == "-o StrictHostKeyChecking=no" and "-H" not in argv
    runner = build_launch("mnist-cnn", "horovod", cpu_replicas=1, hostfile="/etc/mpi/hostfile", hostfile_nodes=2)
    assert runner.argv[:5] == ["horovodrun", "-np", "2", "--hostfile", "/etc/mpi/hostfile"]
    with pytest.raises(LaunchError, match="hostfile is for --launcher horovod"):
        build_launch("mnist-cnn", "multiworker", hostfile="/etc/mpi/hostfile", hostfile_nodes=2)


def test_container_names_are_what_docker_accepts():
    assert container_name("mnist-cnn", "/r/results/mnist-cnn/20261121-101500-horovod") == \
        "tf-recipes-mnist-cnn-20261121-101500-horovod"
    assert container_name("mnist-cnn", "/tmp/my run: 2/") == "tf-recipes-mnist-cnn-my-run-2"
    assert container_name("mnist-cnn", "/") == "tf-recipes-mnist-cnn"
    assert container_name("mnist-cnn", "/r/parts", "4242") == "tf-recipes-mnist-cnn-parts-4242"


def test_a_tf_config_that_cannot_work_is_named_before_anything_waits_on_it():
    good = build_tf_config(["a:1", "b:2"], 1)
    assert check_tf_config(good)["task"] == {"type": "worker", "index": 1}
    cluster = {"worker": ["a:1", "b:2"]}
    for config, message in (
            ({"cluster": cluster, "task": {"type": "worker", "index": 5}},
             "task index 5 is outside its cluster's 2 worker address(es) (0..1)"),
            ({"cluster": cluster, "task": {"type": "worker", "index": -1}}, "task index -1 is outside"),
            ({"cluster": cluster, "task": {"type": "chief", "index": 0}}, "task type 'chief' is not in its cluster"),
            ({"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}},
             "lists a:1 more than once"),
            ({"cluster": cluster}, 'needs "task"'), ({"task": {"type": "worker", "index": 0}}, 'needs "cluster"')):
        with pytest.raises(UserError, match=re.escape(message)):
            check_tf_config(json.dumps(config))
    with pytest.raises(UserError, match="not valid JSON"):
        check_tf_config("{worker")


def test_a_job_whose_chief_wrote_its_stop_marker_stopped_whatever_its_launcher_reports(tmp_path):
    """horovodrun reports its ranks' stop as a failure, or as success when Ctrl-C reached it too: the stop
    marker written during the job says what happened; one from an earlier job does not."""
    import json
    import os
    import time

    from tf_recipes.contract import EXIT_STOPPED
    from tf_recipes.operations.spawn import job_status

    started = time.time()
    assert [job_status(status, str(tmp_path), started) for status in (0, 1, 4)] == [0, 1, 4]
    (tmp_path / "stopped.json").write_text(json.dumps({"step": 12, "total_steps": 60, "signal": "SIGTERM"}))
    assert [job_status(status, str(tmp_path), started) for status in (0, 1, 143)] == [EXIT_STOPPED] * 3
    os.utime(tmp_path / "stopped.json", (started - 60, started - 60))  # an earlier job's marker
    assert [job_status(status, str(tmp_path), started) for status in (0, 1)] == [0, 1]
