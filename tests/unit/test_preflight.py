"""The pure parts of the preflight check (common/tf_recipes/operations/preflight.py), the commands it is started with
(`invoke preflight`, `invoke sbatch --preflight`, `invoke k8s --preflight`) and the task's --dry and
errors. The real runs are in tests/integration/test_preflight_runs.py."""
import json
import os
import shlex
import stat
import subprocess

import pytest

from commands import choices, k8s
from commands.slurm import render_sbatch
from tf_recipes import contract
from tf_recipes.operations import preflight
from helpers import run_invoke

# NCCL_DEBUG=INFO lines as NCCL logs them, from public bug reports (NVIDIA/nccl, NVIDIA/nccl-tests,
# horovod/horovod, Mellanox/nv_peer_memory issue threads); the host names are theirs.
IB_USING = [  # NCCL 2.4: both "Using" lines are logged; NET/IB is the one chosen
    "master_node:20:289 [0] NCCL INFO NET/Socket : Using [0]ib0:192.168.11.1<0>",
    "master_node:20:289 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).",
    "master_node:20:289 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.",
    "master_node:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>",
    "NCCL version 2.4.7+cuda10.0",
]
IB_CHANNELS = [
    ":22901:22901 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/4",
    ":22901:22901 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/5",
    ":22901:22916 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.",
    ":22901:22901 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 0",
]
ROCE = [
    "NCCL version 2.19.3+cuda12.3",
    "dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; "
    "OOB enp220s0np0:11.1.128.136<0>",
    "dgxh100-4:460770:460842 [0] NCCL INFO Using non-device net plugin version 0",
    "dgxh100-4:460770:460842 [0] NCCL INFO Using network IB",
]
IB_PLUGIN = ["hostname-test:987:1260 [7] NCCL INFO Channel 03/0 : 47[7] -> 39[7] [receive] via NET/IBext_v8/2"]
SOCKET_FALLBACK = [  # IB disabled: sockets over the loopback
    "axa:3048391:3048566 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.",
    "axa:3048391:3048566 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
    "axa:3048391:3048566 [0] NCCL INFO Using network Socket",
]
SOCKET_CHANNELS = [  # two nodes: P2P inside each, sockets between them
    "<cluster_name>:919:1150 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read",
    "<cluster_name>:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3",
    "ubuntu:9621:9685 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [receive] via NET/Socket/0",
]
HOROVOD_SOCKET = [  # as mpirun prefixes every rank's output
    "[1,1]<stdout>:ip-172-31-0-63:2121:2136 [1] NCCL INFO NET/Socket: Using 2 threads and 8 sockets per thread",
    "[1,1]<stdout>:ip-172-31-0-63:2121:2136 [1] NCCL INFO Channel 01 : 1[1c0] -> 2[1d0] [send] via NET/Socket/0",
    "[1,4]<stdout>:ip-172-31-12-129:1759:1773 [0] NCCL INFO Channel 00 : 0[1b0] -> 4[1b0] [receive] via NET/Socket/0",
]
ONE_NODE = ["<cluster_name>:921:1146 [2] NCCL INFO Channel 00/0 : 10[2] -> 9[1] via P2P/IPC/read",
            "<cluster_name>:923:1147 [4] NCCL INFO Channel 00/0 : 12[4] -> 11[3] via P2P/IPC/read"]


@pytest.mark.parametrize("lines, transport, devices, version", [
    (IB_USING, "IB", "[0]mlx5_0:1/IB", "2.4.7"),
    (IB_USING[:1] + IB_CHANNELS, "IB", None, None),
    (ROCE, "IB", "[0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]", "2.19.3"),
    (IB_PLUGIN, "IB", None, None),
    (SOCKET_FALLBACK, "socket", "[0]lo:127.0.0.1<0>", None),
    (SOCKET_CHANNELS, "socket", None, None),
    (HOROVOD_SOCKET, "socket", None, None),
    (ONE_NODE, "none", None, None),
    (["2026-11-23 07:46:37: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on."], None, None, None),
])
def test_the_nccl_parser_names_the_transport_nccl_chose(lines, transport, devices, version):
    found = preflight.nccl_transport(lines)
    assert (found["transport"], found["devices"], found["version"]) == (transport, devices, version), found


def test_channels_decide_over_the_using_lines():
    # NCCL logs the socket interface it would use, then connects the channels over IB.
    assert preflight.nccl_transport(IB_USING + IB_CHANNELS)["channels"] == {"NET/IB": 2}
    assert preflight.nccl_transport(["x NCCL INFO NET/IB : Using [0]mlx5_0:1/IB", *SOCKET_CHANNELS])["transport"] \
        == "socket"
    # Some channels over IB, one over sockets: a fallback all the same.
    assert preflight.nccl_transport(IB_CHANNELS + SOCKET_CHANNELS[1:2])["transport"] == "socket"


def report(rank, *, got=3.0, transport=None, gpus=()):
    """A rank's report with the fields summarize() and render_table() read (tf_recipes.operations.preflight's
    _report)."""
    return {"rank": rank, "host": f"node{rank}", "pid": 100 + rank, "local_replicas": 1, "devices": ["CPU:0"],
            "gpus": list(gpus), "versions": {"tensorflow": "2.17.1", "keras": "3.8.0", "horovod": "0.28.1",
                                              "cuda": "none", "nccl": "none"},
            "allreduce": {"got": [got]}, "nccl": preflight.nccl_transport(transport or []),
            "bandwidth": [preflight.bandwidth_row(4096, [0.002, 0.001, 0.003], 2)]}


def test_the_sum_is_exact_and_a_wrong_one_fails():
    assert preflight.expected_sum(2) == 3 and preflight.expected_sum(16) == 136
    good = preflight.summarize([report(0), report(1)], launcher="horovod", replicas=2, nodes=1, allow_socket=False)
    assert good["ok"] and good["status"] == contract.EXIT_DONE and good["problems"] == []
    bad = preflight.summarize([report(0), report(1, got=2.0)], launcher="horovod", replicas=2, nodes=1,
                              allow_socket=False)
    assert bad["status"] == contract.EXIT_CLUSTER
    assert bad["problems"] == ["rank 1: the all-reduce gave [2.0], not 3 on every replica"]


def test_a_socket_fallback_fails_only_a_multi_node_gpu_job():
    reports = [report(0, transport=SOCKET_CHANNELS, gpus=["A100"]), report(1, transport=SOCKET_CHANNELS, gpus=["A100"])]
    flagged = preflight.summarize(reports, launcher="horovod", replicas=2, nodes=2, allow_socket=False)
    assert not flagged["ok"] and "over sockets" in flagged["problems"][0] and flagged["nccl_transport"] == "socket"
    assert preflight.summarize(reports, launcher="horovod", replicas=2, nodes=1, allow_socket=False)["ok"]
    assert preflight.summarize(reports, launcher="horovod", replicas=2, nodes=2, allow_socket=True)["ok"]
    ib = [report(0, transport=IB_CHANNELS, gpus=["A100"]), report(1, transport=IB_CHANNELS, gpus=["A100"])]
    assert preflight.summarize(ib, launcher="horovod", replicas=2, nodes=2, allow_socket=False)["ok"]


def test_the_table_shows_every_rank_the_sum_and_the_bandwidth():
    reports = preflight.decode_reports([a + b for a, b in zip(preflight.encode_report(report(0), 0, 2),
                                                              preflight.encode_report(report(1), 1, 2),
                                                              strict=True)], 2)
    result = preflight.summarize(reports, launcher="multiworker", replicas=2, nodes=2, allow_socket=False)
    result.update(ranks=reports, bandwidth=reports[0]["bandwidth"])
    table = preflight.render_table(result).splitlines()
    assert table[0] == "preflight: multiworker, 2 process(es), 2 replica(s) on 2 node(s): OK"
    assert table[1].split() == ["rank", "host", "devices", "TF", "Keras", "Horovod", "CUDA", "NCCL", "transport",
                                "all-reduce"]
    assert table[2].split() == ["0", "node0", "CPU:0", "2.17.1", "3.8.0", "0.28.1", "none", "none", "none", "3",
                                "(expected", "3)"]
    assert table[3].startswith("1  ") and "node1" in table[3]
    assert table[-1].split() == ["4", "KiB", "2.00", "2.0", "2.0"]  # median 2 ms: 4096 B / 2 ms


def test_reports_travel_as_numbers_and_come_back_whole():
    vector = [0.0] * (preflight.REPORT_BYTES * 3)
    for rank in (0, 2):
        vector = [a + b for a, b in zip(vector, preflight.encode_report(report(rank), rank, 3), strict=True)]
    back = preflight.decode_reports(vector, 3)
    assert back[0] == json.loads(json.dumps(report(0))) and back[2]["host"] == "node2"
    assert back[1] == {"rank": 1, "missing": True}


def test_ranks_that_never_arrived_or_froze_are_named():
    seen = {0: {"stage": "bandwidth", "changed": 99.0, "host": "a", "pid": 1},
            1: {"stage": "joining", "changed": 80.0, "host": "b", "pid": 2},
            3: {"stage": "done", "changed": 50.0, "host": "c", "pid": 3}}
    judged = preflight.judge_ranks(4, seen, now=100.0, stale_after=10)
    assert judged == {"missing": [2], "frozen": [1]}
    assert preflight.describe_ranks(judged, seen, 100.0) == (
        "rank 2 never arrived; rank 1 (b, pid 2) froze at stage joining (no heartbeat for 20 s)")
    assert preflight.judge_ranks(2, seen, now=100.0, stale_after=30) == {"missing": [], "frozen": []}


TF_CONFIG_1 = json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}})
IN_A_BATCH_SCRIPT = {"SLURM_PROCID": "0", "SLURM_NTASKS": "16"}  # what sbatch's shell has, srun or not


@pytest.mark.parametrize("launcher, environ, expected", [
    ("horovod", {"HOROVOD_RANK": "3", "HOROVOD_SIZE": "8", **IN_A_BATCH_SCRIPT}, (3, 8)),
    ("horovod", {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, (1, 2)),
    ("horovod", {"SLURM_PROCID": "5", "SLURM_NTASKS": "16"}, (5, 16)),
    ("multiworker", {"SLURM_PROCID": "5", "SLURM_NTASKS": "16"}, (5, 16)),
    ("multiworker", {"JOB_COMPLETION_INDEX": "1", "TF_RECIPES_WORKERS": "4"}, (1, 4)),
    # tf_recipes.operations.spawn inside a job
    ("multiworker", {"TF_CONFIG": TF_CONFIG_1, **IN_A_BATCH_SCRIPT}, (1, 2)),
    ("mirrored", IN_A_BATCH_SCRIPT, (0, 1)),
    ("single", {}, (0, 1)),
])
def test_each_launcher_s_rank_is_known_before_any_collective(launcher, environ, expected):
    assert preflight.ranks_from_env(environ, launcher) == expected


def test_sizes_parse_and_print():
    assert [preflight.parse_size(s) for s in "4K,64K,1M,16M,100".split(",")] == [4096, 65536, 2 ** 20, 2 ** 24, 100]
    assert preflight.format_size(2 ** 24) == "16 MiB" and preflight.format_size(100) == "100 B"
    with pytest.raises(ValueError, match="not a message size"):
        preflight.parse_size("2")


# -- the rendered commands -------------------------------------------------------------------------------

def test_sbatch_preflight_is_a_first_step_with_the_same_srun_and_container():
    plain = render_sbatch("mnist-cnn", "horovod", nodes=2, gpus_per_node=8, sif="/sif/m.sif")
    checked = render_sbatch("mnist-cnn", "horovod", nodes=2, gpus_per_node=8, sif="/sif/m.sif", preflight=True)
    assert choices.PREFLIGHT_MODULE not in plain
    sruns = [line for line in checked.splitlines() if line.startswith("srun")]
    assert len(sruns) == 2
    check, train = sruns
    prefix = train.split(" python ")[0]
    assert check.startswith(prefix + " python -m tf_recipes.operations.preflight --launcher horovod --deadline 120 ")
    assert check.endswith('--run-id "$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}" --results-dir /results || exit $?')
    assert [line for line in checked.splitlines() if choices.PREFLIGHT_MODULE not in line and
            not line.startswith("# ")] == [line for line in plain.splitlines() if not line.startswith("# ")]


@pytest.mark.parametrize("check_status, ran_training, status", [(0, True, 0), (contract.EXIT_CLUSTER, False, 4)])
def test_a_failed_preflight_step_ends_the_batch_script_before_training(tmp_path, check_status, ran_training, status):
    """The rendered script, run by bash with an srun that records its calls."""
    fake = tmp_path / "bin" / "srun"
    fake.parent.mkdir()
    fake.write_text('#!/bin/bash\necho "$*" >> "$SRUN_LOG"\n'
                    'if [[ "$*" == *tf_recipes.operations.preflight* ]]; then exit "$CHECK_STATUS"; fi\nexit 0\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch("mnist-cnn", "multiworker", nodes=2, gpus_per_node=0, preflight=True))
    log = tmp_path / "srun.log"
    process = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={
        **os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "SRUN_LOG": str(log),
        "CHECK_STATUS": str(check_status), "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "7"})
    assert process.returncode == status, process.stderr
    calls = log.read_text().splitlines()
    assert "tf_recipes.operations.preflight" in calls[0]
    assert f"--run-id 7.0 --results-dir {tmp_path}/results/mnist-cnn/slurm-7" in calls[0]
    assert (len(calls) == 2 and "recipes/mnist-cnn/train.py" in calls[1]) == ran_training


@pytest.mark.parametrize("kind", ["mpijob", "tfjob", "job"])
def test_k8s_preflight_runs_first_in_the_container_that_starts_training(kind):
    plain = k8s.build_manifests("mnist-cnn", kind=kind, image="img", workers=2, gpus_per_worker=8)
    checked = k8s.build_manifests("mnist-cnn", kind=kind, image="img", workers=2, gpus_per_worker=8, preflight=True)
    assert choices.PREFLIGHT_MODULE not in json.dumps(plain)

    def containers(documents):
        text = json.dumps(documents)
        return [c for c in _find(json.loads(text), "containers")]
    before, after = containers(plain), containers(checked)
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert len(changed) == 1  # the launcher (mpijob) or the worker
    old, new = changed[0]
    assert new["command"][:2] == ["/bin/bash", "-c"]
    check, _, train = new["command"][2].partition(" && exec ")
    assert shlex.split(train) == old["command"]
    launcher = "horovod" if kind == "mpijob" else "multiworker"
    assert f"-m tf_recipes.operations.preflight --launcher {launcher} --deadline 120" in check
    assert check.endswith(f"--results-dir /results/mnist-cnn-{'horovod' if kind == 'mpijob' else 'multiworker'}")
    if kind == "mpijob":
        assert check.startswith("mpirun -np 16 ") and "--hostfile /etc/mpi/hostfile" in check


def _find(node, key):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from (v if k == key else _find(v, key))
    elif isinstance(node, list):
        for item in node:
            yield from _find(item, key)


# -- the task ---------------------------------------------------------------------------------------------

def test_dry_prints_the_launch_command_with_the_preflight_module_and_runs_nothing(tmp_path):
    results = tmp_path / "never"
    process = run_invoke("preflight", "mnist-cnn", "--gpus", "0", "--cpu-replicas", "2", "--launcher", "multiworker",
                         "--runtime", "local", "--results-dir", str(results), "--deadline", "30", "--dry")
    assert process.returncode == 0, process.stderr
    line = next(line for line in process.stdout.splitlines() if line.startswith("+ "))
    assert "-m tf_recipes.operations.spawn --nproc 2 -- " in line
    assert " -m tf_recipes.operations.preflight --launcher multiworker --deadline 30 " in line
    assert line.endswith(f"--results-dir {results}") and "train.py" not in line
    assert not results.exists()
    run = run_invoke("run", "mnist-cnn", "--gpus", "0", "--cpu-replicas", "2", "--launcher", "multiworker",
                     "--runtime", "local", "--results-dir", str(results), "--dry")
    same_launch = next(line for line in run.stdout.splitlines() if line.startswith("+ ")).split(" -- ")[0]
    assert line.split(" -- ")[0] == same_launch


@pytest.mark.parametrize("args, message", [
    (["--deadline", "soon"], "--deadline 'soon' is not a number of seconds"),
    (["--launcher", "deepspeed"], "unknown launcher 'deepspeed'"),
    (["--gpus", "2", "--cpu-replicas", "4"], "applies only with --gpus 0"),
])
def test_bad_input_is_one_line(args, message):
    process = run_invoke("preflight", "mnist-cnn", "--runtime", "local", *args, "--dry")
    assert process.returncode == 2 and message in process.stderr and "Traceback" not in process.stderr
