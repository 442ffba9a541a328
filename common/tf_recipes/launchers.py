"""The four ways to run one training job, behind one interface (docs/library.md, Launchers): single (one
device), mirrored (MirroredStrategy over the local GPUs or N logical CPU devices), multiworker
(MultiWorkerMirroredStrategy; cluster from TF_CONFIG, SLURM or an Indexed Job) and horovod. The loop is
tf_recipes.training's GradientTape: Keras 3's `fit` fails under the last two (tensorflow#72388, horovod#4290).
`SyncBatchNormalization` is batch norm over the global batch under each of them.
"""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import os
import re
import shutil
import socket
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from tf_recipes import cluster, contract
from tf_recipes.contract import COLLECTIVES, GPUS_PER_PROCESS_ENV, HOROVOD_PEER_ERRORS, LAUNCHERS
from tf_recipes.contract import PEER_ERRORS, ClusterError, UserError
from tf_recipes.data import InputShard, eval_share


class LauncherError(UserError, RuntimeError):
    """A launcher cannot start as configured; the message says what to change."""


def weights_fingerprint(arrays) -> str:
    """sha256 over the raw bytes of a list of arrays: equal only when every weight is bit-identical."""
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(str(array.dtype).encode() + str(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def replica_copies(variable):
    """The per-replica copies of a (Keras or tf) variable on this process, in replica order."""
    tf_variable = getattr(variable, "value", variable) if not isinstance(variable, tf.Variable) else variable
    return list(getattr(tf_variable, "values", (tf_variable,)))  # Distributed: a mirrored variable's copies


def _gpus(grow_memory: bool = False) -> list:
    """The physical GPUs; with `grow_memory`, each set to take its memory as needed."""
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus if grow_memory else []:
        tf.config.experimental.set_memory_growth(gpu, True)
    return gpus


class Launcher:
    """Every launcher's interface, on the tf.distribute strategy a subclass builds (Horovod: on Horovod)."""

    name = "base"
    num_workers = 1  # processes in the job
    worker_index = 0  # this process
    num_replicas = 1  # model replicas in the whole job
    local_replicas = 1  # model replicas in this process
    num_nodes = 1  # hosts in the job
    strategy: tf.distribute.Strategy
    # Distributed: errors a collective raises when a peer died or froze; the loop reports them as such
    peer_errors: tuple = tuple(getattr(tf.errors, name) for name in PEER_ERRORS)

    @property
    def traits(self) -> dict:
        """What this launcher is (contract.LAUNCHER_TRAITS); the training loop reads these, never the name."""
        return contract.LAUNCHER_TRAITS[self.name]

    @property
    def is_chief(self) -> bool:
        """Only the chief prints progress and writes checkpoints and results."""
        return self.worker_index == 0  # Distributed: the chief is worker 0

    def input_shard(self, per_replica_batch: int) -> InputShard:
        """This process's share of the data: one input pipeline per worker process."""
        # Distributed: one data shard per process
        return self._shard(self.num_workers, self.worker_index, per_replica_batch)

    def _shard(self, pipelines: int, index: int, batch: int) -> InputShard:
        """Input pipeline `index` of `pipelines`, in per-replica batches of `batch` for the job's replicas."""
        return InputShard(pipelines, index, batch, batch * self.num_replicas)

    def eval_share(self, num_examples: int) -> slice:
        """This process's contiguous share of an evaluation set: every example in exactly one share."""
        # Distributed: eval shard per process
        return eval_share(num_examples, self.num_workers, self.worker_index)

    def scope(self):
        """Where the model and optimizer are built, so that their variables exist on every replica."""
        return self.strategy.scope()  # Strategy: variables mirrored on every replica

    def distribute_dataset(self, dataset_fn, per_replica_batch: int):
        """`dataset_fn(InputShard)` -> per-replica batches; returns what `run` takes, step by step."""

        def per_worker(ctx: tf.distribute.InputContext):
            return dataset_fn(self._shard(ctx.num_input_pipelines, ctx.input_pipeline_id, per_replica_batch))

        # Strategy: one pipeline per worker
        return self.strategy.distribute_datasets_from_function(per_worker)

    def run(self, replica_fn, batch, reduce: bool = True):
        """Run `replica_fn(*batch)` on every replica; its dict of outputs summed over all (or None,
        unreduced)."""
        outputs = self.strategy.run(replica_fn, args=tuple(batch))  # Strategy: the step on every replica
        if not reduce:
            return None
        # Strategy: step outputs summed over replicas
        return {k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for k, v in outputs.items()}

    def aggregate_gradients(self, gradients):
        """Gradients every replica applies. Strategies sum inside `apply_gradients`; Horovod here."""
        return gradients

    def prepare(self, model, optimizer):
        """Called once the model and optimizer exist and any checkpoint is restored."""

    def mean_over_replicas(self, tensors):
        """In a replica's step: the mean of `tensors` over all replicas, for state no gradient all-reduce
        keeps equal (Keras 3's batch-norm statistics), so that a checkpoint of any step resumes
        bit-identically."""
        if not tensors or self.num_replicas == 1:
            return tensors
        # Strategy: mean all-reduce in the step
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, tensors)

    def _per_replica(self, value, dtype=None):
        """A distributed value: `value(i)` on this process's i-th replica."""
        first = self.worker_index * self.local_replicas
        # Strategy: one value per replica
        return self.strategy.experimental_distribute_values_from_function(
            lambda context: tf.constant(value(context.replica_id_in_sync_group - first), dtype)
        )

    def sum_over_processes(self, values: np.ndarray) -> np.ndarray:
        """Element-wise float64 sum of `values` over every process of the job."""
        values = np.asarray(values, np.float64)
        if self.num_workers == 1:
            return values
        # from each process's first replica
        summed = self._per_replica(lambda i: values if i == 0 else 0 * values)
        # Strategy: one reduce
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, summed, axis=None).numpy()

    def all_fingerprints(self, variables) -> list[str]:
        """Fingerprint of every replica in the job, known to every process."""
        # Distributed: one fingerprint per replica of this process
        per_replica = zip(*[replica_copies(v) for v in variables], strict=False)
        local = [weights_fingerprint([copy.numpy() for copy in copies]) for copies in per_replica]
        # Collectives carry numbers, not strings: each hex digest travels as 16-bit chunks.
        codes = [[int(fp[i : i + 4], 16) for i in range(0, len(fp), 4)] for fp in local]
        # Distributed: fingerprints gathered from every replica
        return ["".join(f"{int(code):04x}" for code in row) for row in self.gather_replica_rows(codes)]

    def gather_replica_rows(self, rows) -> list[list[float]]:
        """Every replica's row of numbers (`rows`: this process's) on every process; float32 under a
        strategy."""
        if self.num_workers == 1:
            return [[float(value) for value in row] for row in rows]
        # Strategy: rows
        gathered = self.strategy.gather(self._per_replica(lambda i: [rows[i]], tf.float32), axis=0)
        return gathered.numpy().astype(np.float64).tolist()

    def chief_decides(self, action, refused: UserError):
        """`action()` on the chief, and its answer (None on the others); when it raises a UserError, every
        process raises, the others `refused`, so that none goes on and waits for a chief that left."""
        answer, refusal = None, None
        if self.is_chief:
            try:
                answer = action()
            except UserError as error:
                refusal = error
        if self.sum_over_processes([1.0 if refusal else 0.0])[0]:  # Distributed: every process learns of it
            raise refusal or refused
        return answer

    def barrier(self):
        """Wait until every process arrives: a sum over the processes, which each one must join."""
        if self.num_workers > 1:  # Distributed: wait for every process
            self.sum_over_processes([0.0])


class SingleLauncher(Launcher):
    """One replica in one process, on the first GPU or the CPU, under TensorFlow's default strategy: the
    reference every other launcher must train the same model as."""

    name = "single"

    def __init__(self, cpu_replicas: int = 1, **_):
        if cpu_replicas != 1:
            raise LauncherError(
                f"--cpu-replicas {cpu_replicas} does not apply to --launcher single, which runs one "
                "replica; use --launcher mirrored, multiworker or horovod for more"
            )
        _gpus(grow_memory=True)
        self.strategy = tf.distribute.get_strategy()  # the first GPU if there is one, else the CPU


class MirroredLauncher(Launcher):
    """One process, a replica per local GPU (MirroredStrategy, NCCL all-reduce). Without a GPU, the CPU is
    split into --cpu-replicas logical devices, so that the same distributed code runs and is tested on any
    machine; that must happen before TensorFlow initialises its devices, hence create_launcher first."""

    name = "mirrored"

    def __init__(self, cpu_replicas: int = 1, **_):
        devices = None  # every visible GPU; NCCL all-reduce
        # the CPU split into N logical devices, before TensorFlow initialises them
        if not _gpus(grow_memory=True):
            # Strategy: the CPU split into replicas
            logical = [tf.config.LogicalDeviceConfiguration()] * cpu_replicas
            tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0], logical)
            devices = [f"/cpu:{i}" for i in range(cpu_replicas)]
        self.strategy = tf.distribute.MirroredStrategy(devices=devices)  # Strategy: one replica per device
        self.num_replicas = self.local_replicas = self.strategy.num_replicas_in_sync


class MultiWorkerLauncher(Launcher):
    """A process per GPU, or per node, over several nodes (MultiWorkerMirroredStrategy). The cluster comes
    from TF_CONFIG, a Kubernetes Indexed Job's variables or SLURM's (_cluster_resolver); every worker first
    waits for its peers' ports for at most --join-timeout s, so that a missing worker is one line naming it
    (exit 4) instead of a collective that waits for ever."""

    name = "multiworker"

    def __init__(self, collective: str = "auto", join_timeout: float = 300.0, **_):
        resolver = _cluster_resolver()  # Strategy: the cluster this worker belongs to
        _gpus(grow_memory=True)
        spec = resolver.cluster_spec().as_dict()
        addresses = [address for kind in sorted(spec, key=lambda t: t != "chief") for address in spec[kind]]
        chiefs = len(spec.get("chief", []))  # a worker's index counts the chief before it
        self.worker_index = resolver.task_id + (chiefs if resolver.task_type == "worker" else 0)
        self.num_workers = len(addresses)
        self.num_nodes = len({address.rsplit(":", 1)[0] for address in addresses})
        wait_for_peers(addresses, self.worker_index, join_timeout)  # Distributed: every worker answers first
        # Distributed: workers that answer but disagree on the cluster would block in C++ below: exit after
        # the deadline
        faulthandler.dump_traceback_later(join_timeout, exit=True)
        implementation = getattr(tf.distribute.experimental.CommunicationImplementation, collective.upper())
        options = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
        # Strategy: replicas across worker processes
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=options
        )
        self.num_replicas = self.strategy.num_replicas_in_sync
        self.local_replicas = self.num_replicas // self.num_workers
        self.barrier()  # Distributed: only a complete cluster passes
        faulthandler.cancel_dump_traceback_later()


def _cluster_resolver():
    """TF's resolver of the cluster: TF_CONFIG (given, or from a Kubernetes Indexed Job) or SLURM's
    variables."""
    if "TF_CONFIG" not in os.environ and (config := cluster.indexed_job_tf_config(os.environ, wait=True)):
        os.environ["TF_CONFIG"] = config  # Strategy: TF_CONFIG from a Kubernetes Indexed Job
    if "TF_CONFIG" in os.environ:
        cluster.check_tf_config(os.environ["TF_CONFIG"])
        # Strategy: the cluster from TF_CONFIG
        return tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if "SLURM_PROCID" not in os.environ:
        raise LauncherError(
            "--launcher multiworker needs a cluster: set TF_CONFIG for every worker (e.g. start them with "
            "`python -m tf_recipes.operations.spawn --nproc N -- python train.py ...`) or run under SLURM "
            "srun"
        )
    from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as slurm

    check_slurm_environment(os.environ)
    has_gpus = os.environ.get("CUDA_VISIBLE_DEVICES") or shutil.which("nvidia-smi")  # nvidia-smi counts them
    if gpus := (slurm.get_num_gpus() if has_gpus else 0):
        return slurm.SlurmClusterResolver(gpus_per_node=gpus)  # Strategy: the cluster from SLURM
    # Without GPUs TF's resolver would place no task: one nominal slot per task, CUDA_VISIBLE_DEVICES left
    # alone.
    tasks = max(slurm.expand_tasks_per_node(os.environ["SLURM_STEP_TASKS_PER_NODE"]))
    # Strategy: SLURM's
    return slurm.SlurmClusterResolver(gpus_per_node=tasks, gpus_per_task=1, auto_set_gpu=False)


def _answers(address: str) -> bool:
    """Whether something accepts a TCP connection at `address` (host:port)."""
    host, port = address.rsplit(":", 1)
    with contextlib.suppress(OSError):  # refused, timed out, or a name that does not resolve (yet)
        socket.create_connection((host.strip("[]"), int(port)), timeout=1.0).close()
        return True
    return False


def wait_for_peers(addresses: list[str], own: int, seconds: float) -> None:
    """Wait until every other worker's port answers (TensorFlow would wait an hour, beyond Python's reach),
    holding this one's open meanwhile; a ClusterError naming those that never answered within `seconds`."""
    port = int(addresses[own].rsplit(":", 1)[1])
    try:
        family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
        listener = socket.create_server(("", port), family=family, dualstack_ipv6=family == socket.AF_INET6)
    except OSError as error:
        raise ClusterError(
            f"worker {own}: its port {port} ({addresses[own]}) cannot be opened ({error.strerror}); another "
            "process holds it: stop that process or give this worker another port"
        ) from None
    others, deadline = [i for i in range(len(addresses)) if i != own], time.monotonic() + seconds
    try:
        while others := [i for i in others if not _answers(addresses[i])]:
            if time.monotonic() > deadline:
                who = ", ".join(f"worker {i} ({addresses[i]})" for i in others)
                raise ClusterError(
                    f"worker {own}: the cluster did not form within {seconds:g} s: {who} never joined; start "
                    "every worker with the same cluster (TF_CONFIG, SLURM or Job), check that the addresses "
                    "are reachable from this one, or raise --join-timeout"
                )
            time.sleep(0.5)
    finally:
        listener.close()  # TensorFlow's server takes the port over


def check_slurm_environment(environ) -> None:
    """The SLURM variables the cluster resolver reads, checked first: a LauncherError naming the value."""
    counts = []
    for name, minimum in (("SLURM_PROCID", 0), ("SLURM_STEP_NUM_TASKS", 1)):
        text = environ.get(name, "")
        if not text.strip().isdigit() or int(text) < minimum:
            raise LauncherError(
                f"{name}={text!r} is not a whole number >= {minimum}; run the workers with srun"
            )
        counts.append(int(text))
    if counts[0] >= counts[1]:
        raise LauncherError(f"SLURM_PROCID={counts[0]} is not below SLURM_STEP_NUM_TASKS={counts[1]}")
    for name in ("SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"):
        if not environ.get(name, "").strip():
            raise LauncherError(f"{name}={environ.get(name, '')!r} is empty; run the workers with srun")
    tasks = environ["SLURM_STEP_TASKS_PER_NODE"]
    if not re.fullmatch(r"\d+(\(x\d+\))?(,\d+(\(x\d+\))?)*", tasks):
        raise LauncherError(f"SLURM_STEP_TASKS_PER_NODE={tasks!r} is not like 2 or 2(x3),1")


class HorovodLauncher(Launcher):
    """A rank per GPU under horovodrun, mpirun or srun --mpi, outside any tf.distribute strategy: Horovod
    sums the gradients itself (aggregate_gradients) and rank 0's state is broadcast once (prepare). Horovod
    builds only against the ngc-25.02 stack's TensorFlow; elsewhere its absence is one line saying so."""

    name = "horovod"

    def __init__(self, **_):
        try:
            import horovod.tensorflow as hvd
        except ImportError as error:
            stack, default = contract.stack_of_tensorflow(tf.__version__), contract.DEFAULT_STACK
            if "horovod" in contract.STACK_LAUNCHERS[stack]:
                raise LauncherError(
                    f"--launcher horovod needs Horovod ({error}); build it with `bash ci/setup.sh --horovod` "
                    "or use the container image"
                ) from None
            raise LauncherError(
                f"--launcher horovod needs Horovod, which builds only on the {default} stack (TensorFlow "
                f"2.17); this Python has TensorFlow {tf.__version__}, the {stack} stack: use --launcher "
                f"multiworker, or `bash ci/setup.sh --stack {default} --horovod`, or its image (invoke run "
                f"--stack {default})"
            ) from None
        from horovod.common import exceptions as horovod_exceptions

        self.hvd = hvd  # Horovod: the collectives' module
        hvd.init()  # Horovod: one process per replica, started by horovodrun, mpirun or srun
        if gpus := _gpus():
            # Horovod: one GPU per process, by local rank
            tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
            _gpus(grow_memory=True)
        # Horovod: errors of a lost or frozen rank (Gloo's timeout: "Horovod has been shut down")
        found = (getattr(horovod_exceptions, n, None) or getattr(tf.errors, n) for n in HOROVOD_PEER_ERRORS)
        self.peer_errors = Launcher.peer_errors + tuple(found)
        self.num_workers = self.num_replicas = hvd.size()  # Horovod: ranks are replicas
        self.worker_index = hvd.rank()  # Horovod: this rank
        self.num_nodes = hvd.cross_size()  # Horovod: nodes of the job

    def scope(self):
        return contextlib.nullcontext()

    def distribute_dataset(self, dataset_fn, per_replica_batch):
        return dataset_fn(self.input_shard(per_replica_batch))  # Horovod: each rank reads its own shard

    def run(self, replica_fn, batch, reduce=True):
        outputs = replica_fn(*batch)
        if not reduce:
            return None
        # Horovod: step outputs summed over ranks (the losses are already divided by the global batch)
        return {key: self.hvd.allreduce(value, op=self.hvd.Sum) for key, value in outputs.items()}

    def aggregate_gradients(self, gradients):
        # Horovod: gradient all-reduce, a sum: each loss is already scaled by 1/global_batch
        return self.hvd.grouped_allreduce(gradients, op=self.hvd.Sum)

    def prepare(self, model, optimizer):
        for variable in model.variables + optimizer.variables:
            # Horovod: rank 0's weights broadcast
            variable.assign(self.hvd.broadcast(variable.value, root_rank=0))

    def mean_over_replicas(self, tensors):
        # Horovod: mean over ranks, one fused all-reduce
        return self.hvd.grouped_allreduce(list(tensors), op=self.hvd.Average) if tensors else tensors

    def sum_over_processes(self, values):
        values = tf.constant(np.asarray(values, np.float64))
        return self.hvd.allreduce(values, op=self.hvd.Sum).numpy()  # Horovod: process sums all-reduced

    def gather_replica_rows(self, rows):
        rows = [[float(value) for value in row] for row in rows]
        # Horovod: rows of every rank
        return [row for rank in self.hvd.allgather_object(rows) for row in rank]


def create_launcher(
    name: str, cpu_replicas: int = 1, collective: str = "auto", join_timeout: float = 300.0
) -> Launcher:
    """Build the named launcher, before anything else touches TensorFlow's devices."""
    classes = {c.name: c for c in (SingleLauncher, MirroredLauncher, MultiWorkerLauncher, HorovodLauncher)}
    if name not in classes:
        raise LauncherError(f"unknown launcher {name!r}; choose one of {', '.join(LAUNCHERS)}")
    if collective not in COLLECTIVES:
        raise LauncherError(f"unknown collective {collective!r}; choose one of {', '.join(COLLECTIVES)}")
    # The GPUs the process's launcher asked for (unset or 0: no check): no silent fallback to fewer.
    text = os.environ.get(GPUS_PER_PROCESS_ENV, "").strip()
    if text and not text.isdigit():
        raise LauncherError(f"{GPUS_PER_PROCESS_ENV}={text!r} is not a whole number of GPUs")
    if (asked := int(text or 0)) and (seen := len(_gpus())) < asked:
        raise LauncherError(
            f"asked for {asked} GPU(s) per process ({GPUS_PER_PROCESS_ENV}={asked}) but TensorFlow sees "
            f"{seen} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); check the NVIDIA "
            "driver (nvidia-smi), the CUDA libraries TensorFlow loads, that the container runtime got "
            "--gpus (docker run --gpus, apptainer --nv), and CUDA_VISIBLE_DEVICES; or run with --gpus 0"
        )
    return classes[name](cpu_replicas=cpu_replicas, collective=collective, join_timeout=join_timeout)


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Batch norm over the global batch, as the field trains segmentation (SyncBN): in training, every
    replica normalises with the mean and variance of all replicas' examples, under every launcher; in
    inference, with the moving statistics, as any batch norm. Under the strategies Keras all-reduces the
    sums (`synchronized=True`); under Horovod, whose ranks have no replica context, this layer all-reduces
    the same sums with Horovod and computes the moments by Keras' formula, so that a job of two ranks
    trains bit for bit what two replicas of a strategy train. One replica: the batch's own statistics."""

    def __init__(self, **options):
        super().__init__(synchronized=True, **options)

    def _moments(self, inputs, mask):
        hvd = sys.modules.get("horovod.tensorflow")
        if mask is not None or hvd is None or not hvd.is_initialized() or hvd.size() == 1:
            return super()._moments(inputs, mask)
        x = tf.cast(inputs, tf.float32)  # as keras.ops.moments: 16-bit statistics lose too much
        axes = self._reduction_axes
        # Horovod: the sums of every rank, added in one all-reduce each, in the order Keras adds them
        sums = [tf.reduce_sum(part, axis=axes, keepdims=True) for part in (x, tf.square(x), tf.ones_like(x))]
        total, squares, count = (hvd.allreduce(part, op=hvd.Sum) for part in sums)
        mean = tf.math.divide_no_nan(total, count)
        variance = tf.maximum(tf.math.divide_no_nan(squares, count) - tf.square(mean), 0.0)
        mean, variance = tf.squeeze(mean, axes), tf.squeeze(variance, axes)
        if inputs.dtype in (tf.float16, tf.bfloat16):
            limit = tf.float16.max
            mean, variance = (
                tf.cast(tf.clip_by_value(v, -limit, limit), inputs.dtype) for v in (mean, variance)
            )
        return mean, variance
