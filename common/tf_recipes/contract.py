"""The names a recipe's train.py and everything that starts it or reads what it wrote agree on: launchers,
collectives, stacks, exit statuses and their errors, results.json's fields, the export's files. Every name
is used inside a training image; the host side's own are commands/choices.py's. Imports nothing."""

LAUNCHERS = ("single", "mirrored", "multiworker", "horovod")
# What each launcher is: everything outside launchers.py reads a trait, never compares names. one_process: one
# process drives its node's replicas; peers_from: "TF_CONFIG" (or SLURM's variables) or "mpi" (horovodrun,
# mpirun, srun --mpi); collective: tf.distribute's all-reduce in the step, or Horovod's around
# apply_gradients; k8s_kind: what `invoke k8s` makes, an Indexed Job or an MPIJob.
_TRAITS = "one_replica one_process multi_node gpus_per_process peers_from collective k8s_kind".split()
_TRAIT_ROWS = {
    "single": (True, True, False, "all", None, None, None),
    "mirrored": (False, True, False, "all", None, "strategy", None),
    "multiworker": (False, False, True, 1, "TF_CONFIG", "strategy", "job"),
    "horovod": (False, False, True, 1, "mpi", "horovod", "mpijob"),
}
LAUNCHER_TRAITS = {name: dict(zip(_TRAITS, row, strict=True)) for name, row in _TRAIT_ROWS.items()}


def launcher_trait(launcher: str, trait: str):
    """One trait of a launcher (LAUNCHER_TRAITS); a KeyError names an unknown launcher or trait."""
    return LAUNCHER_TRAITS[launcher][trait]


COLLECTIVES = ("auto", "ring", "nccl")  # multiworker all-reduce implementations

# The software stacks, each pinned by stacks/NAME.txt: ngc-25.02 has NVIDIA's last NGC TensorFlow (2.17),
# the only one Horovod 0.28.1 builds against; current has the newest TensorFlow.
STACKS = ("ngc-25.02", "current")
DEFAULT_STACK = "ngc-25.02"
STACK_LAUNCHERS = {"ngc-25.02": LAUNCHERS, "current": ("single", "mirrored", "multiworker")}
STACK_FIRST_TENSORFLOW = {"ngc-25.02": (2, 17), "current": (2, 20)}  # the oldest TensorFlow of each


def stack_of_tensorflow(version: str) -> str:
    """The stack of a TensorFlow version ("2.21.0", "2.17.0+nv25.2"): the newest whose first TensorFlow it
    has."""
    have, first = tuple(int(part) for part in version.split(".")[:2]), STACK_FIRST_TENSORFLOW
    return max((stack for stack in STACKS if have >= first[stack]), key=first.get, default=DEFAULT_STACK)


# The exit statuses of every train.py.
EXIT_DONE = 0  # finished; results.json written
EXIT_USER_ERROR = 2  # a user mistake or bad data; nothing written, one line on stderr says what to change
EXIT_DESYNC = 3  # the replicas finished with different weights (the desync guard); no results.json
EXIT_CLUSTER = 4  # the cluster did not form, or a peer was lost mid-run (infrastructure: retry)
# --target METRIC=VALUE was not reached; results.json, checkpoint and export are written
EXIT_TARGET_MISSED = 13
# stopped on SIGTERM/SIGUSR1 with a checkpoint (--resume): 128 + SIGTERM, which Kubeflow retries
EXIT_STOPPED = 143


class UserError(Exception):
    """A mistake the user can fix (a flag, a path, bad data): exit EXIT_USER_ERROR, one line."""


class DiskFullError(UserError):
    """A write ran out of space (ENOSPC) or quota (EDQUOT); the message names the folder and bytes."""


# The GPUs one training process must see, set by whatever starts it; unset or 0: no check.
GPUS_PER_PROCESS_ENV = "TF_RECIPES_GPUS_PER_PROCESS"


class DesyncError(RuntimeError):
    """Replicas finished training with different weights: exit EXIT_DESYNC."""


class ClusterError(RuntimeError):
    """The cluster did not form, or a peer was lost; the message names who and what to check: exit
    EXIT_CLUSTER."""


class StopRequested(Exception):
    """The job stopped on a signal after checkpointing `step`: exit EXIT_STOPPED."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


class RunFinished(Exception):
    """--resume of a run that already finished: nothing is trained or written, exit EXIT_DONE."""


# The errors a collective raises when a peer died or froze (tf.errors, and Horovod's too): EXIT_CLUSTER.
PEER_ERRORS = ("UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError")
HOROVOD_PEER_ERRORS = ("HorovodInternalError", "UnknownError")

# What every results.json holds.
RESULT_FIELDS = frozenset(
    "recipe launcher nodes replicas global_batch steps images_per_sec images_per_sec_per_replica "
    "step_time_p50_ms step_time_p90_ms losses final_metrics replica_fingerprints versions".split()
)
RESULTS_FILE = "results.json"
CONFIG_FILE = "config.yaml"  # every flag of the run, which `train.py --config` runs again
FINAL_WEIGHTS_FILE = "final.weights.h5"
STOPPED_FILE = "stopped.json"  # {"step", "total_steps", "signal"}: the job stopped on a signal

# The exported model (tf_recipes.export writes it; predict.py reads it).
EXPORT_DIR = "export"  # RESULTS/export: a TF Serving model base
EXPORT_INPUT = "images"  # tf.string [None]: encoded JPEG/PNG/BMP/GIF files
# {"recipe", "task", "image_size", "channels", "outputs"; segmentation: "output_size"}
EXPORT_INFO_FILE = "model.json"
EXPORT_LABELS_FILE = "labels.txt"  # one class name per line, in class-id order
EXPORT_CLASSES_FILE = "classes.json"  # segmentation: [{"id", "name", "colour": [r, g, b]}]


def class_name_problem(name) -> str | None:
    """Why `name` cannot be a class name (a line of EXPORT_LABELS_FILE), or None if it can."""
    if not isinstance(name, str) or not name.strip():
        return "is empty or only whitespace"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in name):
        return "holds a line break or another control character"
    if any(0xD800 <= ord(c) < 0xE000 for c in name):  # a file name's bytes that are not UTF-8
        return "is not valid UTF-8"
    return None


# A Kubernetes Indexed Job's pods: what commands/k8s.py sets and tf_recipes.cluster reads.
INDEXED_JOB_INDEX = "JOB_COMPLETION_INDEX"  # set by Kubernetes
INDEXED_JOB_WORKERS = "TF_RECIPES_WORKERS"
INDEXED_JOB_HOST_PATTERN = "TF_RECIPES_WORKER_HOST_PATTERN"  # "{index}" stands for a worker's index
INDEXED_JOB_PORT = "TF_RECIPES_WORKER_PORT"
INDEXED_JOB_RESOLVE_TIMEOUT = "TF_RECIPES_RESOLVE_TIMEOUT"
INDEXED_JOB_DEFAULT_RESOLVE_TIMEOUT = 600.0
