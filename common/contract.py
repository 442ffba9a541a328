"""The contract between a recipe's train.py and everything that starts it or reads what it wrote.

One place for the names every part agrees on: the launchers and collectives a train.py accepts,
the software stacks, the exit statuses and the errors that lead to each, the fields every results.json
holds and the files of the export. `invoke`, the builders in commands/, the nightly and the benchmarks
read them from here; common/ raises and writes them. Every name here is used inside a training image
(by common/, a recipe or tools/); the names only the host side uses (runtimes, image bases, Horovod
runners, the preflight's module) are commands/choices.py's, and tests/unit/test_layout.py keeps them
apart.

This module imports nothing, so anything may import it without an import loop and without
loading TensorFlow.
"""

LAUNCHERS = ("single", "mirrored", "multiworker", "horovod")
# What each launcher is. Every part that treats launchers differently (the builders in commands/,
# common/'s training loop, tasks/, ci/) reads a trait here instead of comparing launcher names; only
# common/launchers.py, which implements them, names them (tests/unit/test_layout.py finds any other).
#   one_replica       exactly one replica, whatever --gpus says
#   one_process       one process drives every replica of its node (a tf.distribute strategy in
#                     one process); otherwise one process per replica
#   multi_node        the replicas may span several nodes
#   gpus_per_process  "all" the node's GPUs, or 1
#   peers_from        how a process finds its peers: None (it has none), "TF_CONFIG" (a JSON cluster
#                     description, or what SLURM's variables give TF's cluster resolver), or "mpi" (ranks
#                     started by horovodrun, mpirun or srun --mpi)
#   collective        what adds up the gradients: None, "strategy" (tf.distribute's all-reduce inside
#                     the step, with Keras's loss scaling per replica) or "horovod" (Horovod's allreduce
#                     around apply_gradients, outside any strategy)
#   k8s_kind          the Kubernetes kind `invoke k8s` makes for it unless told (commands/k8s.py): "job"
#                     (an Indexed Job), "mpijob" (the MPI Operator's MPIJob), or None (it runs on one node)
LAUNCHER_TRAITS = {
    "single": {"one_replica": True, "one_process": True, "multi_node": False, "gpus_per_process": "all",
               "peers_from": None, "collective": None, "k8s_kind": None},
    "mirrored": {"one_replica": False, "one_process": True, "multi_node": False, "gpus_per_process": "all",
                 "peers_from": None, "collective": "strategy", "k8s_kind": None},
    "multiworker": {"one_replica": False, "one_process": False, "multi_node": True, "gpus_per_process": 1,
                    "peers_from": "TF_CONFIG", "collective": "strategy", "k8s_kind": "job"},
    "horovod": {"one_replica": False, "one_process": False, "multi_node": True, "gpus_per_process": 1,
                "peers_from": "mpi", "collective": "horovod", "k8s_kind": "mpijob"},
}


def launcher_trait(launcher: str, trait: str):
    """One trait of a launcher (LAUNCHER_TRAITS); a KeyError names an unknown launcher or trait."""
    return LAUNCHER_TRAITS[launcher][trait]


COLLECTIVES = ("auto", "ring", "nccl")  # multiworker all-reduce implementations

# -- the software stacks (each pinned by its pip constraints file, stacks/NAME.txt) --------------------
# ngc-25.02: the TensorFlow of NVIDIA's last NGC TensorFlow image (TF 2.17), the only one Horovod
# 0.28.1 builds against. current: the newest TensorFlow release, for today's Pythons. A train.py asked
# for Horovod finds the stack of its TensorFlow (stack_of_tensorflow); the stacks' image bases and
# constraints files are the host side's (commands/choices.py).
STACKS = ("ngc-25.02", "current")
DEFAULT_STACK = "ngc-25.02"
STACK_LAUNCHERS = {
    "ngc-25.02": LAUNCHERS,
    "current": ("single", "mirrored", "multiworker"),
}
# The oldest TensorFlow of each stack (stacks/NAME.txt pins the exact release); the stack of a
# Python environment is the newest stack whose first TensorFlow it has.
STACK_FIRST_TENSORFLOW = {"ngc-25.02": (2, 17), "current": (2, 20)}


def stack_of_tensorflow(version: str) -> str:
    """The stack a TensorFlow version ("2.21.0", "2.17.0+nv25.2") belongs to."""
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    newest = DEFAULT_STACK
    for stack in STACKS:
        if major_minor >= STACK_FIRST_TENSORFLOW[stack] >= STACK_FIRST_TENSORFLOW[newest]:
            newest = stack
    return newest

# -- exit statuses of every train.py ----------------------------------------------------------------
EXIT_DONE = 0  # finished; results.json written
EXIT_USER_ERROR = 2  # a user mistake or bad data; nothing written, one line on stderr says what to change
EXIT_DESYNC = 3  # the replicas finished with different weights (the desync guard); no results.json
EXIT_CLUSTER = 4  # the cluster did not form, or a peer was lost mid-run (infrastructure: retry)
EXIT_TARGET_MISSED = 13  # --target METRIC=VALUE was not reached; results.json, checkpoint and export are written
# Stopped by SIGTERM/SIGUSR1 with a checkpoint of the stop step (retry with --resume). 128 + SIGTERM:
# what a stopped process conventionally reports, and inside the range (128-255) that Kubeflow's
# `restartPolicy: ExitCode` treats as retryable.
EXIT_STOPPED = 143


class UserError(Exception):
    """A mistake the user can fix (a flag, a path, bad data): exit EXIT_USER_ERROR, one line."""


class GpuMismatchError(UserError):
    """TensorFlow sees fewer GPUs than the process's launcher asked for (GPUS_PER_PROCESS_ENV)."""


class DiskFullError(UserError):
    """A write ran out of space (ENOSPC) or quota (EDQUOT); the message names the folder and bytes."""


# The GPUs one training process must see, set by every launcher (`invoke run`, tf_recipes.spawn, the
# rendered SLURM script and Kubernetes manifests); unset or 0: no check (a train.py started by hand).
GPUS_PER_PROCESS_ENV = "TF_RECIPES_GPUS_PER_PROCESS"


class DesyncError(RuntimeError):
    """Replicas finished training with different weights: exit EXIT_DESYNC."""


class ClusterError(RuntimeError):
    """The cluster did not form, or a peer was lost; the message names who and what to check:
    exit EXIT_CLUSTER."""


class TargetMissed(Exception):
    """No evaluation of the run reached its --target: exit EXIT_TARGET_MISSED, one line."""


class StopRequested(Exception):
    """The job stopped on a signal after checkpointing `step`: exit EXIT_STOPPED."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


class RunFinished(Exception):
    """--resume of a run that already finished: nothing is trained or written, exit EXIT_DONE."""


# TensorFlow errors (tf.errors.<name>) a collective raises when a peer died or froze: EXIT_CLUSTER.
PEER_ERRORS = ("UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError")
# Horovod's ranks also report a lost peer with these.
HOROVOD_PEER_ERRORS = ("HorovodInternalError", "UnknownError")

# -- results.json -------------------------------------------------------------------------------------
# What every results.json holds (tf_recipes.training.Trainer.save_results writes them; the nightly and
# `invoke bench` read them).
RESULT_FIELDS = frozenset({
    "recipe", "launcher", "nodes", "replicas", "global_batch", "steps", "images_per_sec",
    "images_per_sec_per_replica", "step_time_p50_ms", "step_time_p90_ms", "losses", "final_metrics",
    "replica_fingerprints", "versions",
})
RESULTS_FILE = "results.json"
FINAL_WEIGHTS_FILE = "final.weights.h5"
STOPPED_FILE = "stopped.json"  # {"step", "total_steps", "signal"}: the job stopped on a signal

# -- the exported model (common/export.py writes it at the end of a run; predict.py reads it) ---------
EXPORT_DIR = "export"  # RESULTS/export: a TF Serving model base
EXPORT_SIGNATURE = "serving_default"
EXPORT_INPUT = "images"  # tf.string [None]: encoded JPEG/PNG/BMP/GIF files
EXPORT_INFO_FILE = "model.json"  # {"recipe", "task", "image_size", "channels", "outputs"; segmentation: "output_size"}
EXPORT_LABELS_FILE = "labels.txt"  # one class name per line, in class-id order
EXPORT_CLASSES_FILE = "classes.json"  # segmentation: [{"id", "name", "colour": [r, g, b]}]
PREDICTIONS_FILE = "predictions.csv"  # what a classification predict.py writes in --out


def host_name_problem(host: str) -> str | None:
    """Why `host` cannot be one of --hosts, or None if it can: it becomes `HOST:SLOTS` for horovodrun -H
    and `HOST:PORT` in TF_CONFIG, so it is a host name or an IPv4 address (letters, digits, '.', '-', '_')."""
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")
    if not host or not set(host) <= allowed or host[0] in ".-" or host[-1] in ".-":
        return (f"{host!r} is not a host name or IPv4 address (letters, digits, '.', '-' and '_'); give "
                "comma-separated names such as node1,node2")
    return None


def class_name_problem(name) -> str | None:
    """Why `name` cannot be a class name, or None if it can. Each class name is one line of
    EXPORT_LABELS_FILE, which predict.py splits into lines: a line break (any that str.splitlines
    knows), carriage return or other control character would shift every label after it, and a
    name that is not UTF-8 (a folder name's undecodable bytes) cannot be written there at all."""
    if not isinstance(name, str) or not name.strip():
        return "is empty or only whitespace"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in name):
        return "holds a line break or another control character"
    if any(0xD800 <= ord(c) < 0xE000 for c in name):  # a file name's bytes that are not UTF-8
        return "is not valid UTF-8"
    return None


# -- the preflight check (`invoke preflight`, `python -m tf_recipes.preflight`) ----------------------------
PREFLIGHT_FILE = "preflight.json"  # what every rank reported, and the verdict (in the results folder)
PREFLIGHT_RANKS_DIR = "preflight-ranks"  # one heartbeat file per rank, beside preflight.json
PREFLIGHT_DEFAULT_DEADLINE = 120  # seconds for the whole check, from each process's start

# -- a Kubernetes Indexed Job's pods: what commands/k8s.py sets and common/indexed_job.py reads ---------
INDEXED_JOB_INDEX = "JOB_COMPLETION_INDEX"  # set by Kubernetes
INDEXED_JOB_WORKERS = "TF_RECIPES_WORKERS"
INDEXED_JOB_HOST_PATTERN = "TF_RECIPES_WORKER_HOST_PATTERN"  # "{index}" stands for a worker's index
INDEXED_JOB_PORT = "TF_RECIPES_WORKER_PORT"
INDEXED_JOB_RESOLVE_TIMEOUT = "TF_RECIPES_RESOLVE_TIMEOUT"
INDEXED_JOB_DEFAULT_RESOLVE_TIMEOUT = 600.0
