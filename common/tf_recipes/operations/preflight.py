"""A check of a cluster before a long job: `python -m tf_recipes.operations.preflight --launcher L`, started
in every process by the same launcher command as a recipe's train.py (`invoke preflight RECIPE`, the
`--preflight` step of `invoke sbatch` and `invoke k8s`).

    python -m tf_recipes.operations.spawn --nproc 2 -- \\
        python -m tf_recipes.operations.preflight --launcher multiworker --deadline 30

Every process reports its host, rank, visible devices and the TensorFlow, Keras, Horovod, CUDA and
NCCL versions; one all-reduce over every replica is checked for its exact sum (replica r adds r+1,
so n replicas sum to n(n+1)/2, exact in float32); all-reduces of a few message sizes give a rough
bandwidth; on GPUs, NCCL's INFO lines name the transport it chose (InfiniBand or sockets). Rank 0
prints a table and writes preflight.json to the results folder.

The whole check ends within --deadline seconds. Every process writes a heartbeat file
(RESULTS/preflight-ranks/rank-R.json) once a second; when a collective fails or the deadline comes,
the process that notices reads them and names the ranks that never arrived (no file) or froze (a
heartbeat that stopped), writes that into preflight.json and exits with EXIT_CLUSTER. The heartbeat
folder must be one that every process sees (the results folder of a job is: a shared file system
under SLURM, the shared results volume on Kubernetes); with a folder per node, ranks of other nodes
are reported as never arrived.

Nothing here is imported by a recipe; TensorFlow is imported only by main(), so the pure parts
(the NCCL log parser, the verdict, the table) load without it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import threading
import time

from tf_recipes import contract, user_paths
from tf_recipes.atomic import write_atomically
from tf_recipes.cli import at_least, positive_int
from tf_recipes.contract import launcher_trait
from tf_recipes.operations import PREFLIGHT_DEFAULT_DEADLINE, PREFLIGHT_FILE

DEFAULT_SIZES = "4K,64K,1M,16M"
MIN_DEADLINE = 5  # seconds: below it not even a healthy cluster can answer
HEARTBEAT_SECONDS = 1.0
STALE_SECONDS = 10.0  # a heartbeat that has not moved for this long: the rank froze or died
REPORT_BYTES = 4096  # a rank's report, gathered as bytes over the collective
RANKS_DIR = "preflight-ranks"  # one heartbeat file per rank, beside preflight.json
FINAL_STAGES = ("done", "failed")


# -- pure parts ---------------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    """'4K' -> 4096, '16M' -> 16777216, '100' -> 100 bytes; a ValueError for anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(i?B)?\s*", text, re.I)
    size = int(match.group(1)) * 1024 ** " KMG".index(match.group(2).upper() or " ") if match else 0
    if size < 4:
        raise ValueError(f"{text!r} is not a message size of at least 4 bytes, such as 4K or 16M")
    return size


def format_size(size: int) -> str:
    for unit, factor in (("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def expected_sum(replicas: int) -> float:
    """What every element of the check all-reduce must be: replica r adds r+1."""
    return replicas * (replicas + 1) / 2


def ranks_from_env(environ, launcher: str) -> tuple[int, int]:
    """(rank, processes) of this process as its launcher set them, before any collective exists, in the order
    the launcher itself looks: horovod from horovodrun, mpirun (Open MPI) or srun; multiworker from TF_CONFIG
    (as tf_recipes.operations.spawn and TFJob set it), a Kubernetes Indexed Job or srun; single and mirrored
    are one process."""
    if launcher_trait(launcher, "one_process"):
        return 0, 1
    pairs = [
        ("HOROVOD_RANK", "HOROVOD_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMIX_RANK", "SLURM_NTASKS"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
    ]
    if launcher_trait(launcher, "peers_from") == "TF_CONFIG":
        try:
            config = json.loads(environ.get("TF_CONFIG", ""))
            workers = [a for group in config["cluster"].values() for a in group]
            return int(config["task"]["index"]), len(workers)
        except (ValueError, KeyError, TypeError):
            pairs = [
                (contract.INDEXED_JOB_INDEX, contract.INDEXED_JOB_WORKERS),
                ("SLURM_PROCID", "SLURM_NTASKS"),
            ]
    for rank, size in pairs:
        # Distributed: the rank and size a launcher set, read before any collective
        if environ.get(rank, "").isdigit() and environ.get(size, "").isdigit():
            return int(environ[rank]), int(environ[size])
    return 0, 1


_CHANNEL = re.compile(r"NCCL INFO Channel \d+(?:/\d+)? ?: .*\bvia (NET/[A-Za-z_]+|P2P|SHM|CollNet)")
_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_NET_USING = re.compile(r"NCCL INFO NET/(IB|Socket) ?: Using (\[.+?)(?:\s*;\s*OOB.*)?$")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")


def _net_kind(name: str) -> str:
    """'NET/IB', 'NET/IBext_v8', 'IB' -> IB; 'NET/Socket', 'Socket' -> socket; a plugin keeps its name."""
    name = name.removeprefix("NET/")
    if name.startswith("IB"):
        return "IB"
    return "socket" if name.lower() == "socket" else name


def nccl_transport(lines) -> dict:
    """What NCCL's INFO lines (NCCL_DEBUG=INFO) say about the transport it chose between nodes.

    `transport`: "IB" (InfiniBand or RoCE, NET/IB), "socket" (TCP, NET/Socket), another network
    plugin's name, "none" when NCCL connected no peer over a network (one node: P2P, SHM), or None
    when the lines say nothing (no NCCL, or NCCL_DEBUG not INFO). The channels' `via NET/...`
    decide (one channel over sockets is enough to report "socket"); without them, "Using network X";
    without that, the NET/IB or NET/Socket "Using" line."""
    channels, networks, using, version = {}, [], {}, None
    for line in lines:
        if match := _CHANNEL.search(line):
            via = match.group(1)
            channels[via] = channels.get(via, 0) + 1
        elif match := _NETWORK.search(line):
            networks.append(match.group(1))
        elif match := _NET_USING.search(line):
            using.setdefault(match.group(1), match.group(2).strip())
        elif version is None and (match := _VERSION.search(line)):
            version = match.group(1)
    nets = sorted({_net_kind(via) for via in channels if via.startswith("NET/")})
    if nets:
        transport = "socket" if "socket" in nets else nets[0]  # any channel over sockets is a fallback
    elif networks:
        transport = _net_kind(networks[-1])
    elif using:
        transport = "IB" if "IB" in using else "socket"
    else:
        transport = "none" if channels else None
    devices = using.get("IB" if transport == "IB" else "Socket")
    return {"transport": transport, "devices": devices, "channels": channels, "version": version}


def judge_ranks(expected: int, seen: dict, now: float, stale_after: float = STALE_SECONDS) -> dict:
    """Which ranks never arrived and which froze, from the heartbeats a process watched.

    `seen`: {rank: {"stage", "changed" (local monotonic time the heartbeat last moved), "host", "pid"}}.
    A rank with no heartbeat file never arrived; one whose heartbeat has not moved for `stale_after`
    seconds, and that had not finished, froze (stopped or died)."""
    missing = [rank for rank in range(expected) if rank not in seen]
    frozen = [
        rank
        for rank, beat in sorted(seen.items())
        if beat["stage"] not in FINAL_STAGES and now - beat["changed"] >= stale_after
    ]
    return {"missing": missing, "frozen": frozen}


def describe_ranks(judged: dict, seen: dict, now: float) -> str:
    """'rank 1 never arrived; rank 2 (host, pid 123) froze at stage bandwidth (no heartbeat for 12 s)'."""
    parts = [f"rank {rank} never arrived" for rank in judged["missing"]]
    for rank in judged["frozen"]:
        beat = seen[rank]
        parts.append(
            f"rank {rank} ({beat.get('host')}, pid {beat.get('pid')}) froze at stage "
            f"{beat['stage']} (no heartbeat for {now - beat['changed']:.0f} s)"
        )
    return "; ".join(parts)


def summarize(reports: list[dict], *, launcher: str, replicas: int, nodes: int, allow_socket: bool) -> dict:
    """The verdict over every rank's report: what preflight.json holds besides the reports."""
    problems = []
    expected = expected_sum(replicas)
    for report in reports:
        got = report["allreduce"]["got"]
        if any(value != expected for value in got):
            problems.append(
                f"rank {report['rank']}: the all-reduce gave {got}, not {expected:g} on every replica"
            )
    transports = sorted(
        {str(r["nccl"]["transport"]) for r in reports if r["nccl"]["transport"] not in (None, "none")}
    )
    uses_gpu = any(r["gpus"] for r in reports)
    if nodes > 1 and uses_gpu and "socket" in transports and not allow_socket:
        problems.append(
            "NCCL connects the nodes over sockets (NET/Socket), not InfiniBand/RoCE: check that "
            "the container sees /dev/infiniband, NCCL_IB_DISABLE, NCCL_IB_HCA and "
            "NCCL_SOCKET_IFNAME (--allow-socket if this cluster has no InfiniBand)"
        )
    if len(reports) != len({r["rank"] for r in reports}):
        problems.append("two processes reported the same rank")
    return {
        "ok": not problems,
        "status": contract.EXIT_DONE if not problems else contract.EXIT_CLUSTER,
        "launcher": launcher,
        "processes": len(reports),
        "replicas": replicas,
        "nodes": nodes,
        "expected_sum": expected,
        "nccl_transport": ",".join(transports) or "none",
        "problems": problems,
    }


def _row(cells, widths) -> str:
    return "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()


def _table(header, rows) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    return [_row(header, widths)] + [_row(row, widths) for row in rows]


def render_table(result: dict) -> str:
    """The readable report of preflight.json: one line per rank, then the bandwidth per size."""
    verdict = "OK" if result["ok"] else "FAILED"
    lines = [
        f"preflight: {result['launcher']}, {result['processes']} process(es), {result['replicas']} "
        f"replica(s) on {result['nodes']} node(s): {verdict}"
    ]
    header = ("rank", "host", "devices", "TF", "Keras", "Horovod", "CUDA", "NCCL", "transport", "all-reduce")
    rows = []
    for r in result.get("ranks", []):
        v = r["versions"]
        got = ",".join(f"{value:g}" for value in r["allreduce"]["got"])
        rows.append(
            (
                r["rank"],
                r["host"],
                ",".join(r["devices"]),
                v["tensorflow"],
                v["keras"],
                v["horovod"],
                v["cuda"],
                v["nccl"],
                r["nccl"]["transport"] or "none",
                f"{got} (expected {result['expected_sum']:g})",
            )
        )
    lines += _table(header, rows) if rows else ["(no rank reported)"]
    bandwidth = result.get("bandwidth") or []
    if bandwidth:
        lines += [
            "",
            f"all-reduce of float32 over {result['replicas']} replicas (rank 0, median of "
            f"{bandwidth[0]['repeats']}; bus bandwidth = size x 2(n-1)/n / time):",
        ]
        lines += _table(
            ("size", "time ms", "algbw MB/s", "busbw MB/s"),
            [
                (
                    format_size(b["bytes"]),
                    f"{b['median_ms']:.2f}",
                    f"{b['algbw_mb_s']:.1f}",
                    f"{b['busbw_mb_s']:.1f}",
                )
                for b in bandwidth
            ],
        )
    lines += [f"problem: {problem}" for problem in result["problems"]]
    return "\n".join(lines) + "\n"


def bandwidth_row(size: int, times: list[float], replicas: int) -> dict:
    median = sorted(times)[len(times) // 2]
    algbw = size / median / 1e6
    return {
        "bytes": size,
        "repeats": len(times),
        "median_ms": median * 1e3,
        "algbw_mb_s": algbw,
        "busbw_mb_s": algbw * 2 * (replicas - 1) / replicas if replicas > 1 else algbw,
    }


def encode_report(report: dict, rank: int, processes: int) -> list[float]:
    """A rank's report as bytes in its own slot of a vector every process sums: a gather over the
    launcher's own collective, which carries numbers only."""
    data = json.dumps(report, separators=(",", ":")).encode()
    if len(data) > REPORT_BYTES:
        data = json.dumps(
            {**report, "bandwidth": [], "devices": report["devices"][:8]}, separators=(",", ":")
        ).encode()[:REPORT_BYTES]
    vector = [0.0] * (REPORT_BYTES * processes)
    vector[rank * REPORT_BYTES : rank * REPORT_BYTES + len(data)] = [float(b) for b in data]
    return vector


def decode_reports(vector, processes: int) -> list[dict]:
    reports = []
    for rank in range(processes):
        data = bytes(int(v) for v in vector[rank * REPORT_BYTES : (rank + 1) * REPORT_BYTES]).rstrip(b"\0")
        reports.append(json.loads(data) if data else {"rank": rank, "missing": True})
    return reports


# -- heartbeats and the deadline ------------------------------------------------------------------------


def write_json(path: str, value: dict, durable: bool = True) -> None:
    """`path` holds `value` or what it held before. A report is fsynced (it must survive a crash); a
    heartbeat, rewritten every few seconds and read only while the job runs, is only renamed."""
    if durable:
        write_atomically(path, json.dumps(value, indent=1))
        return
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=1)
    os.replace(temporary, path)


class Heartbeat:
    """This rank's heartbeat file, rewritten every second by a thread, and the others' as seen from here."""

    def __init__(self, folder: str, rank: int, expected: int, run_id: str, deadline: float):
        self.folder, self.rank, self.expected, self.run_id = folder, rank, expected, run_id
        self.started, self.deadline = time.time(), deadline
        self.stage, self.beat, self.seen = "starting", 0, {}
        self._last = {}  # rank -> (beat, local monotonic time it last moved)
        os.makedirs(folder, exist_ok=True)
        self._lock, self._watching = threading.Lock(), threading.Lock()

    def start(self) -> "Heartbeat":
        self.write()
        threading.Thread(target=self._run, name="preflight-heartbeat", daemon=True).start()
        return self

    def set_stage(self, stage: str) -> None:
        self.stage = stage
        self.write()

    def write(self) -> None:
        with self._lock:
            self.beat += 1
            write_json(
                os.path.join(self.folder, f"rank-{self.rank}.json"),
                {
                    "run": self.run_id,
                    "rank": self.rank,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "started": self.started,
                    "beat": self.beat,
                    "stage": self.stage,
                },
                durable=False,
            )

    def _run(self) -> None:
        while True:
            time.sleep(HEARTBEAT_SECONDS)
            try:
                if self.stage not in FINAL_STAGES:
                    self.write()
                self.watch()
            except OSError:
                pass  # a full or vanished folder must not end the check; the verdict says what it saw

    def watch(self) -> dict:
        """Read every rank's heartbeat once; return {rank: {"stage", "changed", "host", "pid"}}."""
        with self._watching:  # the heartbeat thread and the one naming the ranks both watch
            return self._watch()

    def _watch(self) -> dict:
        now = time.monotonic()
        for rank in range(self.expected):
            try:
                with open(os.path.join(self.folder, f"rank-{rank}.json")) as handle:
                    beat = json.load(handle)
            except (OSError, ValueError):
                continue
            # Another attempt's file: another run id, or a start so long ago that it gave up already.
            if beat.get("run") != self.run_id or beat.get("started", 0) < self.started - self.deadline:
                continue
            # Distributed: a peer's heartbeat, compared per rank
            if self._last.get(rank, (None,))[0] != beat["beat"]:
                self._last[rank] = (beat["beat"], now)
            self.seen[rank] = {**beat, "changed": self._last[rank][1]}
        return dict(self.seen)

    def verdict(self, reason: str, wait_until: float, stale_after: float = STALE_SECONDS) -> str:
        """Watch until a rank is seen missing or frozen (or `wait_until`, monotonic), then name them."""
        while True:
            now = time.monotonic()
            seen = self.watch()
            judged = judge_ranks(self.expected, seen, now, stale_after)
            judged["frozen"] = [rank for rank in judged["frozen"] if rank != self.rank]
            if judged["missing"] or judged["frozen"] or now >= wait_until:
                named = describe_ranks(judged, seen, now) or "every rank's heartbeat is alive"
                return f"{named} ({reason})"
            time.sleep(0.5)


class Deadline:
    """Ends the process with EXIT_CLUSTER, naming the ranks at fault, when the check fails or runs
    out of time: from the main thread (a collective failed) or from its own thread (the deadline)."""

    def __init__(self, seconds: float, heartbeat: Heartbeat, results_dir: str, launcher: str):
        self.heartbeat, self.results_dir, self.launcher = heartbeat, results_dir, launcher
        self.started = time.monotonic()
        # Time left to write the verdict, exit, and have `invoke preflight` end what is left.
        self.ends = self.started + seconds - min(10.0, seconds / 4)
        self._claimed = threading.Lock()

    def remaining(self) -> float:
        return self.ends - time.monotonic()

    def start(self) -> "Deadline":
        threading.Thread(target=self._run, name="preflight-deadline", daemon=True).start()
        return self

    def stop(self) -> None:
        """The check finished: the deadline no longer ends the process."""
        self._claimed.acquire()

    def _run(self) -> None:
        while self.remaining() > 0:
            time.sleep(0.5)
        self.fail(f"the check did not finish within its deadline (stage {self.heartbeat.stage})", wait=False)

    def fail(self, reason: str, wait: bool = True) -> None:
        """Name the ranks at fault, write preflight.json and exit EXIT_CLUSTER (never returns)."""
        if not self._claimed.acquire(blocking=False):
            time.sleep(3600)  # the other thread is already ending the process
        stage = self.heartbeat.stage
        self.heartbeat.set_stage("failed")
        # A failed collective: watch long enough to tell a frozen rank from a slow one. The deadline:
        # no time left, and a heartbeat silent for a few seconds is the answer.
        watch_until = min(self.ends, time.monotonic() + STALE_SECONDS + 1) if wait else time.monotonic()
        message = self.heartbeat.verdict(
            f"seen from rank {self.heartbeat.rank} at stage {stage}: {reason}",
            watch_until,
            STALE_SECONDS if wait else 3 * HEARTBEAT_SECONDS,
        )
        now = time.monotonic()
        heartbeats = {
            rank: {
                "host": beat.get("host"),
                "pid": beat.get("pid"),
                "stage": beat.get("stage"),
                "silent_s": round(now - beat["changed"], 1),
            }
            for rank, beat in self.heartbeat.watch().items()
        }
        result = {
            "ok": False,
            "status": contract.EXIT_CLUSTER,
            "launcher": self.launcher,
            "processes": self.heartbeat.expected,
            "failed_rank": self.heartbeat.rank,
            "failed_stage": stage,
            "problems": [message],
            "heartbeats": heartbeats,
            "elapsed_s": round(now - self.started, 1),
        }
        try:
            write_json(os.path.join(self.results_dir, PREFLIGHT_FILE), result)
        except OSError:
            pass
        print(f"error: preflight: {message}", file=sys.stderr, flush=True)
        os._exit(contract.EXIT_CLUSTER)  # not sys.exit: TensorFlow's shutdown can wait on a lost peer


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--launcher", choices=contract.LAUNCHERS, default="single")
    parser.add_argument(
        "--cpu-replicas", type=positive_int, default=1, help="mirrored without a GPU: logical CPU devices"
    )
    parser.add_argument(
        "--collective",
        choices=contract.COLLECTIVES,
        default="auto",
        help="multiworker all-reduce implementation",
    )
    parser.add_argument(
        "--results-dir",
        default="results/preflight",
        help=f"where {PREFLIGHT_FILE} and the heartbeat files go; shared by every process",
    )
    parser.add_argument(
        "--deadline",
        type=at_least(MIN_DEADLINE),
        default=PREFLIGHT_DEFAULT_DEADLINE,
        metavar="SECONDS",
        help="end (status 4, naming the ranks that never arrived or froze) after this long",
    )
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="all-reduce message sizes for the bandwidth")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed all-reduces per size")
    parser.add_argument(
        "--allow-socket",
        action="store_true",
        help="do not fail a multi-node GPU job whose NCCL falls back to sockets",
    )
    parser.add_argument(
        "--run-id", default="", help="keeps this attempt's heartbeats apart from an earlier one's"
    )
    args = parser.parse_args(argv)
    try:
        args.sizes = [parse_size(size) for size in args.sizes.split(",") if size.strip()]
    except ValueError as error:
        parser.error(f"--sizes: {error}")
    if not args.sizes:
        parser.error("--sizes: give at least one message size, such as 4K,64K")
    user_paths.exit_if(user_paths.flags_problem({}, {"--results-dir": args.results_dir}))
    return args


def _nccl_log_pattern(results_dir: str) -> str | None:
    """Ask NCCL for its INFO lines in a file per process (unless the user chose otherwise); None on
    machines without a GPU, where no NCCL runs."""
    if not os.environ.get("CUDA_VISIBLE_DEVICES") and not os.path.exists("/dev/nvidia0"):
        return None
    os.environ.setdefault("NCCL_DEBUG", "INFO")
    os.environ.setdefault("NCCL_DEBUG_FILE", os.path.join(os.path.abspath(results_dir), "nccl-%h-%p.log"))
    return os.environ["NCCL_DEBUG_FILE"]


def _nccl_lines(pattern: str | None) -> list[str]:
    if not pattern:
        return []
    path = pattern.replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
    try:
        with open(path, errors="replace") as handle:
            return handle.read().splitlines()
    except OSError:
        return []


# -- the check itself (TensorFlow from here on) ---------------------------------------------------------


def _allreduce(launcher, tf):
    """A function n -> this process's replicas' all-reduced float32 vectors of n elements, to which
    replica r (numbered over the whole job) contributed r+1 in every element."""
    if launcher_trait(launcher.name, "collective") == "horovod":
        hvd = launcher.hvd
        # Horovod: the exact all-reduce of the check, one value per rank
        return lambda n: [hvd.allreduce(tf.fill([n], float(hvd.rank() + 1)), op=hvd.Sum).numpy()]
    strategy, steps = launcher.strategy, {}

    def replica_step(n):
        context = tf.distribute.get_replica_context()
        value = tf.fill([n], tf.cast(context.replica_id_in_sync_group + 1, tf.float32))
        # Strategy: the exact all-reduce of the check under a strategy
        return context.all_reduce(tf.distribute.ReduceOp.SUM, value)

    def run(n):
        if n not in steps:
            steps[n] = tf.function(lambda: strategy.run(replica_step, args=(n,)))
        return [t.numpy() for t in strategy.experimental_local_results(steps[n]())]

    return run


def _measure(allreduce, sizes, repeats: int, replicas: int) -> list[dict]:
    rows = []
    for size in sizes:
        # Distributed: the first all-reduce builds the step and warms the connections
        allreduce(size // 4)  # builds the step and warms the connections
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            # Distributed: the timed all-reduces
            allreduce(size // 4)
            times.append(time.perf_counter() - started)
        rows.append(bandwidth_row(size, times, replicas))
    return rows


def _versions(tf, launcher, nccl: dict, gpus: list) -> dict:
    import keras

    info = tf.sysconfig.get_build_info()
    try:
        import horovod

        horovod_version = horovod.__version__
    except ImportError:
        horovod_version = "none"
    nccl_version = nccl["version"]
    # Horovod: whether NCCL carries the all-reduce
    if (
        nccl_version is None
        and launcher_trait(launcher.name, "collective") == "horovod"
        and launcher.hvd.nccl_built()
    ):  # Horovod: its NCCL, when it was built with it
        nccl_version = str(launcher.hvd.nccl_built())  # Horovod: the version it was built with
    return {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "horovod": horovod_version,
        # The CUDA the TensorFlow build was made for, when there is a GPU to use it on.
        "cuda": (info.get("cuda_version") or "none") if gpus else "none",
        "cudnn": (info.get("cudnn_version") or "none") if gpus else "none",
        "cuda_build": info.get("cuda_version") or "none",
        "nccl": nccl_version or "none",
        "python": sys.version.split()[0],
    }


def _report(tf, launcher, got, bandwidth, nccl_pattern) -> dict:
    gpus = tf.config.list_physical_devices("GPU")
    nccl = nccl_transport(_nccl_lines(nccl_pattern))
    return {
        "rank": launcher.worker_index,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "local_replicas": launcher.local_replicas,
        "devices": list(
            dict.fromkeys(
                d.name.rsplit("device:", 1)[-1]
                for d in tf.config.list_logical_devices()
                if d.device_type in ("CPU", "GPU")
            )
        ),
        "gpus": [tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "versions": _versions(tf, launcher, nccl, gpus),
        "allreduce": {"got": got},
        "bandwidth": bandwidth,
        "nccl": nccl,
    }


def _check(tf, launcher, args, heartbeat, deadline, nccl_pattern) -> dict:
    """Every stage after the cluster formed; the result every process computes alike."""
    import faulthandler

    import numpy as np

    # A collective stuck in C++ while holding the GIL would keep the deadline thread from running.
    faulthandler.dump_traceback_later(max(deadline.remaining(), 1) + 10, exit=True)
    heartbeat.set_stage("all-reduce")
    allreduce = _allreduce(launcher, tf)
    # Distributed: the all-reduce every rank must get exactly
    got = [float(v.min()) if v.min() == v.max() else float("nan") for v in allreduce(1024)]
    heartbeat.set_stage("bandwidth")
    bandwidth = _measure(allreduce, args.sizes, args.repeats, launcher.num_replicas)
    heartbeat.set_stage("gathering")
    report = _report(tf, launcher, got, bandwidth, nccl_pattern)
    encoded = encode_report(report, launcher.worker_index, launcher.num_workers)
    vector = launcher.sum_over_processes(np.array(encoded))
    reports = decode_reports(vector, launcher.num_workers)
    result = summarize(
        reports,
        launcher=args.launcher,
        replicas=launcher.num_replicas,
        nodes=launcher.num_nodes,
        allow_socket=args.allow_socket,
    )
    result.update(
        ranks=reports,
        bandwidth=reports[0]["bandwidth"],
        deadline=args.deadline,
        elapsed_s=round(time.monotonic() - deadline.started, 1),
    )
    launcher.barrier()  # nobody leaves while another still waits on a collective
    faulthandler.cancel_dump_traceback_later()
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    user_paths.exit_if(user_paths.make_folder("--results-dir", args.results_dir))
    rank, expected = ranks_from_env(os.environ, args.launcher)
    heartbeat = Heartbeat(
        os.path.join(args.results_dir, RANKS_DIR), rank, expected, args.run_id, args.deadline
    ).start()
    deadline = Deadline(args.deadline, heartbeat, args.results_dir, args.launcher).start()
    nccl_pattern = _nccl_log_pattern(args.results_dir)
    heartbeat.set_stage("importing")
    import tensorflow as tf

    from tf_recipes.cli import is_peer_error
    from tf_recipes.launchers import create_launcher
    from tf_recipes.stopping import peer_error_summary

    try:
        heartbeat.set_stage("joining")
        launcher = create_launcher(
            args.launcher, args.cpu_replicas, args.collective, join_timeout=max(1.0, deadline.remaining() - 3)
        )
        result = _check(tf, launcher, args, heartbeat, deadline, nccl_pattern)
    except contract.UserError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        os._exit(contract.EXIT_USER_ERROR)
    except Exception as error:  # noqa: BLE001 (only a lost peer is reported as such; the rest re-raised)
        names = {kind.__name__ for kind in type(error).__mro__}
        lost_peer = names & set(contract.HOROVOD_PEER_ERRORS) or is_peer_error(error)
        if not (isinstance(error, contract.ClusterError) or lost_peer):
            raise
        summary = peer_error_summary(error).replace("--join-timeout", "--deadline")
        deadline.fail(f"{type(error).__name__}: {summary}")
    deadline.stop()
    heartbeat.set_stage("done")
    # Distributed: the chief alone writes the report
    if launcher.is_chief:
        write_json(os.path.join(args.results_dir, PREFLIGHT_FILE), result)
        print(render_table(result), end="", flush=True)
        print(f"wrote {os.path.join(os.path.abspath(args.results_dir), PREFLIGHT_FILE)}", flush=True)
        if not result["ok"]:
            print(f"error: preflight: {'; '.join(result['problems'])}", file=sys.stderr, flush=True)
    return result["status"]


if __name__ == "__main__":
    sys.exit(main())
