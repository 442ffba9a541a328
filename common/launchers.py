"""The four ways to run one training job, behind one interface.

    single       one device: the first GPU, or the CPU
    mirrored     tf.distribute.MirroredStrategy over the local GPUs (or N logical CPU devices)
    multiworker  tf.distribute.MultiWorkerMirroredStrategy, cluster from TF_CONFIG or SLURM
    horovod      Horovod: allreduce of gradients, initial state broadcast from rank 0

Every launcher answers the same questions (how many replicas, am I the chief, which share of the
data is mine) and does the same three jobs for the training loop in `tf_recipes.training`: run one step
on every replica and sum what it returns, aggregate gradients, and report a fingerprint of every
replica's weights so that a silent desynchronisation fails the run.

Why not `model.fit`: with Keras 3, `fit` fails under MultiWorkerMirroredStrategy (tensorflow#72388)
and Horovod's Keras callbacks and DistributedOptimizer fail (horovod#4290). A custom loop with a
plain GradientTape works under all four and keeps the replicas bit-identical (Keras >= 3.8).
"""
from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import os
import re
import shutil
import socket
import time

import numpy as np
import tensorflow as tf

from tf_recipes import contract
from tf_recipes.contract import (COLLECTIVES, GPUS_PER_PROCESS_ENV, HOROVOD_PEER_ERRORS, LAUNCHERS, PEER_ERRORS,
                             ClusterError, GpuMismatchError, UserError)
from tf_recipes.data import InputShard, eval_share
from tf_recipes.tf_config import check_tf_config



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


def _gpus():
    return tf.config.list_physical_devices("GPU")


def _allow_gpu_memory_growth():
    for gpu in _gpus():
        tf.config.experimental.set_memory_growth(gpu, True)


class Launcher:
    """Interface of all launchers. Subclasses set the counts in `__init__` and override the rest."""

    name = "base"
    num_workers = 1  # processes in the job
    worker_index = 0  # this process
    num_replicas = 1  # model replicas in the whole job
    local_replicas = 1  # model replicas in this process
    num_nodes = 1  # hosts in the job

    @property
    def traits(self) -> dict:
        """What this launcher is (tf_recipes.contract.LAUNCHER_TRAITS): one_replica, one_process, multi_node,
        gpus_per_process, peers_from, collective. The training loop reads these, never the name."""
        return contract.LAUNCHER_TRAITS[self.name]

    @property
    def is_chief(self) -> bool:
        """Only the chief prints progress and writes checkpoints and results."""
        return self.worker_index == 0  # Distributed: the chief is worker 0

    def input_shard(self, per_replica_batch: int) -> InputShard:
        """This process's share of the data: one input pipeline per worker process."""
        # Distributed: one data shard per process
        return InputShard(self.num_workers, self.worker_index, per_replica_batch,
                          per_replica_batch * self.num_replicas)

    def scope(self):
        return contextlib.nullcontext()

    def distribute_dataset(self, dataset_fn, per_replica_batch: int):
        """`dataset_fn(InputShard)` -> per-replica batches; returns what `run` takes, step by step."""
        raise NotImplementedError

    def run(self, replica_fn, batch, reduce: bool = True):
        """Run `replica_fn(*batch)` on every replica; return its dict of outputs summed over all
        (with `reduce=False`, return nothing and spend no collective on the outputs)."""
        raise NotImplementedError

    def aggregate_gradients(self, gradients):
        """Gradients every replica applies. Strategies sum inside `apply_gradients`; Horovod here."""
        return gradients

    def replica_id(self):
        """In a replica's step: this replica's index in the job, 0 .. num_replicas-1."""
        raise NotImplementedError

    def prepare(self, model, optimizer):
        """Called once the model and optimizer exist and any checkpoint is restored."""

    def mean_over_replicas(self, tensors):
        """In a replica's step: the mean of `tensors` over all replicas (an all-reduce).

        For state that no gradient all-reduce keeps equal: batch-norm moving statistics are updated
        by each replica from its own batch (Keras 3 creates them with aggregation NONE, so even
        MirroredStrategy leaves the copies to drift). Averaging them every step keeps one model at
        every step, so a checkpoint taken at any step resumes bit-identically."""
        return tensors

    def eval_share(self, num_examples: int) -> slice:
        """This process's contiguous share of an evaluation set: every example in exactly one share."""
        return eval_share(num_examples, self.num_workers, self.worker_index)  # Distributed: eval shard per process

    def sum_over_processes(self, values: np.ndarray) -> np.ndarray:
        """Element-wise float64 sum of `values` over every process of the job."""
        return np.asarray(values, np.float64)

    # Errors a collective raises when a peer died or froze; the training loop reports them as such.
    # Distributed: errors of a lost peer
    peer_errors: tuple = tuple(getattr(tf.errors, name) for name in PEER_ERRORS)

    def local_fingerprints(self, variables) -> list[str]:
        # Distributed: one fingerprint per replica
        per_replica = zip(*[replica_copies(v) for v in variables], strict=False)
        return [weights_fingerprint([c.numpy() for c in copies]) for copies in per_replica]

    def all_fingerprints(self, variables) -> list[str]:
        """Fingerprint of every replica in the job, known to every process."""
        # Collectives carry numbers, not strings: each replica's hex digest travels as 16-bit chunks.
        codes = [[int(fp[i:i + 4], 16) for i in range(0, len(fp), 4)] for fp in self.local_fingerprints(variables)]
        # Distributed: fingerprints gathered from every replica
        return ["".join(f"{int(code):04x}" for code in row) for row in self.gather_replica_rows(codes)]

    def gather_replica_rows(self, rows) -> list[list[float]]:
        """`rows`: one equally long list of numbers per replica of this process, in replica order.
        Returns the rows of every replica in the job, in replica order, known to every process.
        The strategies' collectives carry float32: exact for float32 values and whole numbers below 2**24."""
        return [[float(value) for value in row] for row in rows]

    def barrier(self):
        """Wait until every process arrives."""


class StrategyLauncher(Launcher):
    """Shared by single, mirrored and multiworker: they differ only in the strategy they build."""

    strategy: tf.distribute.Strategy

    def scope(self):
        return self.strategy.scope()  # Strategy: variables mirrored on every replica

    def distribute_dataset(self, dataset_fn, per_replica_batch):
        def per_worker(context: tf.distribute.InputContext):
            return dataset_fn(InputShard(context.num_input_pipelines, context.input_pipeline_id,
                                         per_replica_batch, per_replica_batch * self.num_replicas))

        return self.strategy.distribute_datasets_from_function(per_worker)  # Strategy: one pipeline per worker

    def run(self, replica_fn, batch, reduce=True):
        outputs = self.strategy.run(replica_fn, args=tuple(batch))  # Strategy: the step on every replica
        if not reduce:
            return None
        # Strategy: step outputs summed over replicas
        return {key: self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
                for key, value in outputs.items()}

    def replica_id(self):
        return tf.distribute.get_replica_context().replica_id_in_sync_group  # Strategy: the replica's index

    def mean_over_replicas(self, tensors):
        if not tensors or self.num_replicas == 1:
            return tensors
        # Strategy: mean all-reduce in the step
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, tensors)

    def sum_over_processes(self, values):
        values = np.asarray(values, np.float64)
        if self.num_workers == 1:
            return values
        # The first replica of each process contributes its process's values, the others zeros.
        first_local = self.worker_index * self.local_replicas
        # Strategy: a process's sums on its first replica
        values = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(values if ctx.replica_id_in_sync_group == first_local else 0 * values))
        # Strategy: process sums in one reduce
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None).numpy()

    def gather_replica_rows(self, rows):
        if self.num_workers == 1:
            return super().gather_replica_rows(rows)
        # Every replica sends its row; every worker gathers all of them.
        first_local = self.worker_index * self.local_replicas
        # Strategy: each replica's row as its value
        values = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant([rows[ctx.replica_id_in_sync_group - first_local]], tf.float32))
        # Strategy: rows gathered from every worker
        return self.strategy.gather(values, axis=0).numpy().astype(np.float64).tolist()

    def barrier(self):
        if self.num_workers > 1:  # Distributed: wait for every process
            self._barrier()

    @tf.function
    def _barrier(self):
        # One all-reduce of a constant that every replica must join. Traced once, inside a
        # tf.function: the strategy run eagerly adds overhead at every call (and says so in TF 2.21).
        # Strategy: barrier as an all-reduce
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, self.strategy.run(lambda: tf.constant(1.0)),
                                    axis=None)


class SingleLauncher(StrategyLauncher):
    name = "single"

    def __init__(self, cpu_replicas: int = 1, collective: str = "auto"):
        if cpu_replicas != 1:
            raise LauncherError(
                f"--cpu-replicas {cpu_replicas} does not apply to --launcher single, which runs one "
                "replica; use --launcher mirrored, multiworker or horovod for more")
        _allow_gpu_memory_growth()
        # The default strategy places work on the first GPU if there is one, else on the CPU.
        self.strategy = tf.distribute.get_strategy()


class MirroredLauncher(StrategyLauncher):
    name = "mirrored"

    def __init__(self, cpu_replicas: int = 1, collective: str = "auto"):
        gpus = _gpus()
        if gpus:
            _allow_gpu_memory_growth()
            devices = None  # every visible GPU; NCCL all-reduce
        else:
            # No GPU: split the CPU into N logical devices, one replica each. This must happen
            # before TensorFlow initialises its devices, so the launcher is created first thing.
            cpu = tf.config.list_physical_devices("CPU")[0]
            # Strategy: the CPU split into replicas
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_replicas)
            devices = [f"/cpu:{i}" for i in range(cpu_replicas)]
        self.strategy = tf.distribute.MirroredStrategy(devices=devices)  # Strategy: one replica per device
        self.num_replicas = self.local_replicas = self.strategy.num_replicas_in_sync


class MultiWorkerLauncher(StrategyLauncher):
    name = "multiworker"

    def __init__(self, cpu_replicas: int = 1, collective: str = "auto", join_timeout: float = 300.0):
        resolver = self._cluster_resolver()  # Strategy: the cluster this worker belongs to
        _allow_gpu_memory_growth()
        implementation = getattr(tf.distribute.experimental.CommunicationImplementation,
                                 collective.upper())
        spec = resolver.cluster_spec().as_dict()
        addresses = [address for task_type in sorted(spec, key=lambda t: t != "chief") for address in spec[task_type]]
        own = resolver.task_id + (len(spec.get("chief", [])) if resolver.task_type == "worker" else 0)
        self.num_workers = len(addresses)
        self.worker_index = own
        self.num_nodes = len({address.rsplit(":", 1)[0] for tasks in spec.values() for address in tasks})
        wait_for_peers(addresses, own, join_timeout)  # Distributed: every worker answers before TF waits
        # Workers that answer but disagree on the cluster would still block below, in C++ that no
        # Python code can interrupt: faulthandler's watchdog ends the process (status 1, with a
        # stack dump) after the same deadline. The barrier is passed only by a complete cluster.
        # Distributed: a cluster that never forms ends the process
        faulthandler.dump_traceback_later(join_timeout, exit=True)
        # Strategy: replicas across worker processes
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver,
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=implementation))
        self.num_replicas = self.strategy.num_replicas_in_sync
        self.local_replicas = self.num_replicas // self.num_workers
        self.barrier()  # Distributed: only a complete cluster passes
        faulthandler.cancel_dump_traceback_later()

    @staticmethod
    def _cluster_resolver():
        from tf_recipes import indexed_job  # a Kubernetes Indexed Job: TF_CONFIG from its index and peers

        if "TF_CONFIG" not in os.environ and indexed_job.is_indexed_job(os.environ):
            try:
                # Strategy: TF_CONFIG from a Kubernetes Indexed Job
                os.environ["TF_CONFIG"] = indexed_job.tf_config_when_peers_resolve(os.environ)
            except indexed_job.IndexedJobConfigError as error:
                raise LauncherError(str(error)) from None
        if "TF_CONFIG" in os.environ:
            try:
                check_tf_config(os.environ["TF_CONFIG"])
            except ValueError as error:
                raise LauncherError(str(error)) from None
            return tf.distribute.cluster_resolver.TFConfigClusterResolver()  # Strategy: the cluster from TF_CONFIG
        if "SLURM_PROCID" in os.environ:
            return _slurm_cluster_resolver()  # Strategy: the cluster from SLURM
        raise LauncherError(
            "--launcher multiworker needs a cluster: set TF_CONFIG for every worker (e.g. start them "
            "with `python -m tf_recipes.spawn --nproc N -- python train.py ...`) or run under SLURM srun")


def unreachable(addresses: list[str], timeout_s: float = 1.0) -> list[int]:
    """Positions of the `addresses` (host:port) where nothing accepts a TCP connection."""
    missing = []
    for index, address in enumerate(addresses):
        host, port = address.rsplit(":", 1)
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except OSError:  # refused, timed out, or a name that does not resolve (yet)
            missing.append(index)
    return missing


def wait_for_peers(addresses: list[str], own: int, seconds: float) -> None:
    """Before TensorFlow starts its server: wait until every other worker's port answers, holding
    this worker's own port open meanwhile so that the others see it too. Raises ClusterError naming
    the workers that never answered within `seconds`.

    TensorFlow itself waits for a missing worker inside the strategy's constructor, holding the
    GIL, for up to an hour; nothing in Python can interrupt it there, so the check comes first."""
    port = int(addresses[own].rsplit(":", 1)[1])
    try:
        family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
        listener = socket.create_server(("", port), family=family, dualstack_ipv6=family == socket.AF_INET6)
    except OSError as error:
        raise ClusterError(f"worker {own}: its port {port} ({addresses[own]}) cannot be opened ({error.strerror}); "
                           "another process holds it: stop that process or give this worker another port") from None
    others = [i for i in range(len(addresses)) if i != own]
    deadline = time.monotonic() + seconds
    try:
        while others:
            others = [others[i] for i in unreachable([addresses[j] for j in others])]
            if others and time.monotonic() > deadline:
                who = ", ".join(f"worker {i} ({addresses[i]})" for i in others)
                raise ClusterError(
                    f"worker {own}: the cluster did not form within {seconds:g} s: {who} never joined; start "
                    "every worker with the same cluster (TF_CONFIG, SLURM or Job), check that the addresses "
                    "are reachable from this one, or raise --join-timeout")
            if others:
                time.sleep(0.5)
    finally:
        listener.close()  # TensorFlow's server takes the port over


def check_slurm_environment(environ) -> None:
    """The SLURM variables the cluster resolver reads, checked first: a LauncherError naming the value."""
    counts = {}
    for name, minimum in (("SLURM_PROCID", 0), ("SLURM_STEP_NUM_TASKS", 1)):
        text = environ.get(name, "")
        if not text.strip().isdigit() or int(text) < minimum:
            raise LauncherError(f"{name}={text!r} is not a whole number >= {minimum}; run the workers with srun")
        counts[name] = int(text)
    if counts["SLURM_PROCID"] >= counts["SLURM_STEP_NUM_TASKS"]:
        raise LauncherError(f"SLURM_PROCID={counts['SLURM_PROCID']} is not below "
                            f"SLURM_STEP_NUM_TASKS={counts['SLURM_STEP_NUM_TASKS']}")
    for name in ("SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"):
        if not environ.get(name, "").strip():
            raise LauncherError(f"{name}={environ.get(name, '')!r} is empty; run the workers with srun")
    tasks = environ["SLURM_STEP_TASKS_PER_NODE"]
    if not re.fullmatch(r"\d+(\(x\d+\))?(,\d+(\(x\d+\))?)*", tasks):
        raise LauncherError(f"SLURM_STEP_TASKS_PER_NODE={tasks!r} is not like 2 or 2(x3),1")


def _slurm_cluster_resolver():
    """TF's SlurmClusterResolver, also on nodes without GPUs.

    Left alone it counts GPUs with `nvidia-smi` (FileNotFoundError on CPU-only nodes) and hands each
    task its share of them, so with no GPU it places no task at all. Without GPUs it gets one nominal
    slot per task and leaves CUDA_VISIBLE_DEVICES alone.
    """
    from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as slurm

    check_slurm_environment(os.environ)
    has_gpus = os.environ.get("CUDA_VISIBLE_DEVICES") or shutil.which("nvidia-smi")
    gpus = slurm.get_num_gpus() if has_gpus else 0
    if gpus:
        return slurm.SlurmClusterResolver(gpus_per_node=gpus)
    tasks = max(slurm.expand_tasks_per_node(os.environ["SLURM_STEP_TASKS_PER_NODE"]))
    return slurm.SlurmClusterResolver(gpus_per_node=tasks, gpus_per_task=1, auto_set_gpu=False)


class HorovodLauncher(Launcher):
    name = "horovod"

    def __init__(self, cpu_replicas: int = 1, collective: str = "auto"):
        try:
            import horovod.tensorflow as hvd
        except ImportError as error:
            stack = contract.stack_of_tensorflow(tf.__version__)
            if "horovod" not in contract.STACK_LAUNCHERS[stack]:
                raise LauncherError(
                    f"--launcher horovod needs Horovod, which builds only on the {contract.DEFAULT_STACK} stack "
                    f"(TensorFlow 2.17); this Python has TensorFlow {tf.__version__}, the {stack} stack: use "
                    f"--launcher multiworker, or `bash ci/setup.sh --stack {contract.DEFAULT_STACK} --horovod`, "
                    f"or its image (invoke run --stack {contract.DEFAULT_STACK})") from None
            raise LauncherError(
                f"--launcher horovod needs Horovod ({error}); build it with "
                "`bash ci/setup.sh --horovod` or use the container image") from None
        self.hvd = hvd  # Horovod: the collectives' module
        # One process per replica, started by horovodrun, mpirun or srun.
        hvd.init()  # Horovod: one process per replica
        gpus = _gpus()
        if gpus:
            # Horovod: one GPU per process, by local rank
            tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
            _allow_gpu_memory_growth()
        from horovod.common import exceptions as horovod_exceptions
        # A rank failed or froze (Gloo's timeout); the ops then raise "Horovod has been shut down".
        # Horovod: errors of a lost rank
        self.peer_errors = Launcher.peer_errors + tuple(
            getattr(horovod_exceptions, name, None) or getattr(tf.errors, name) for name in HOROVOD_PEER_ERRORS)
        self.num_workers = self.num_replicas = hvd.size()  # Horovod: ranks are replicas
        self.worker_index = hvd.rank()  # Horovod: this rank
        self.num_nodes = hvd.cross_size()  # Horovod: nodes of the job

    def distribute_dataset(self, dataset_fn, per_replica_batch):
        # Horovod: each rank reads its own shard
        return dataset_fn(self.input_shard(per_replica_batch))

    def run(self, replica_fn, batch, reduce=True):
        outputs = replica_fn(*batch)
        if not reduce:
            return None
        # The losses are already divided by the global batch.
        # Horovod: step outputs summed over ranks
        return {key: self.hvd.allreduce(value, op=self.hvd.Sum) for key, value in outputs.items()}

    def aggregate_gradients(self, gradients):
        # The sum of every rank's gradients: each local loss is already scaled by 1/global_batch, so
        # the sum is the gradient of the mean loss over the global batch.
        # Horovod: gradient all-reduce
        return self.hvd.grouped_allreduce(gradients, op=self.hvd.Sum)

    def replica_id(self):
        return self.worker_index  # Horovod: one replica per rank, outside any strategy

    def prepare(self, model, optimizer):
        # Every replica starts from rank 0's model and optimizer state. The optimizer must be built
        # (its slots created) before this, or its state would be left out.
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
        # Horovod: rows gathered from every rank
        return [row for rank in self.hvd.allgather_object(super().gather_replica_rows(rows)) for row in rank]

    def barrier(self):
        self.hvd.allreduce(tf.constant(0.0), op=self.hvd.Sum)  # Horovod: barrier as an all-reduce


def gpus_asked(environ) -> int:
    """The GPUs this process's launcher asked for (GPUS_PER_PROCESS_ENV); 0 when unset."""
    text = environ.get(GPUS_PER_PROCESS_ENV, "").strip()
    if not text:
        return 0
    if not text.isdigit():
        raise LauncherError(f"{GPUS_PER_PROCESS_ENV}={text!r} is not a whole number of GPUs")
    return int(text)


def check_gpus(asked: int, seen: int, environ) -> None:
    """Raise GpuMismatchError when TensorFlow sees fewer GPUs than the launcher asked for: no silent
    fallback to the CPU or to fewer GPUs."""
    if seen >= asked:
        return
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    raise GpuMismatchError(
        f"asked for {asked} GPU(s) per process ({GPUS_PER_PROCESS_ENV}={asked}) but TensorFlow sees {seen}"
        f" (CUDA_VISIBLE_DEVICES={visible!r}); check the NVIDIA driver (nvidia-smi), the CUDA libraries "
        "TensorFlow loads, that the container runtime got --gpus (docker run --gpus, apptainer --nv), "
        "and CUDA_VISIBLE_DEVICES; or run with --gpus 0")


def create_launcher(name: str, cpu_replicas: int = 1, collective: str = "auto",
                    join_timeout: float = 300.0) -> Launcher:
    """Build the named launcher. Call it before anything else touches TensorFlow's devices.

    `join_timeout` (multiworker): seconds for every worker of the cluster to join."""
    classes = {cls.name: cls for cls in (SingleLauncher, MirroredLauncher, MultiWorkerLauncher, HorovodLauncher)}
    if name not in classes:
        raise LauncherError(f"unknown launcher {name!r}; choose one of {', '.join(LAUNCHERS)}")
    if collective not in COLLECTIVES:
        raise LauncherError(f"unknown collective {collective!r}; choose one of {', '.join(COLLECTIVES)}")
    asked = gpus_asked(os.environ)
    if asked:
        check_gpus(asked, len(_gpus()), os.environ)
    if name == "multiworker":
        return MultiWorkerLauncher(cpu_replicas=cpu_replicas, collective=collective, join_timeout=join_timeout)
    return classes[name](cpu_replicas=cpu_replicas, collective=collective)
