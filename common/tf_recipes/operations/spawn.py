"""Start this node's worker processes for MultiWorkerMirroredStrategy, each with its own TF_CONFIG.

    python -m tf_recipes.operations.spawn --nproc 2 -- \\
        python recipes/mnist-cnn/train.py --launcher multiworker

    # two nodes without a scheduler: the same command on each, with its own --node-index
    python -m tf_recipes.operations.spawn --nproc 8 --gpus-per-worker 1 --hosts node1,node2 --node-index 0 \
        --port-base 23456 -- python recipes/mnist-cnn/train.py --launcher multiworker

This is what a cluster scheduler does for a job: it gives worker i the TF_CONFIG with task index i
(and, with --gpus-per-worker, its own GPUs), streams the workers' output, and stops the others as
soon as one fails, so that no worker waits forever on a collective its peer will never join. It exits
with the first failing worker's code. SIGTERM and SIGUSR1 sent to it go on to every worker, which
then stop together with a checkpoint (tf_recipes.stopping) and exit with 143. One node picks free
ports itself; several nodes agree on --port-base (ports port-base .. port-base+nproc-1 on every host
must be free and reachable).

Also what starts a job elsewhere (`invoke run`) uses: signals passed on to child processes, a child stopped
with its parent, and a stopped job's exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from tf_recipes.cli import non_negative_int, positive_int
from tf_recipes.cluster import build_tf_config
from tf_recipes.contract import EXIT_CLUSTER, EXIT_STOPPED, GPUS_PER_PROCESS_ENV
from tf_recipes.operations import host_name_problem
from tf_recipes.stopping import STOP_SIGNALS, stopped_marker
from tf_recipes.user_paths import exit_if


def job_status(status: int, results_dir: str, since: float) -> int:
    """EXIT_STOPPED for a job whose processes stopped on a signal after `since` (the chief's stop marker is
    that new: nothing removes it but a resume), else the launching program's `status`."""
    marker = stopped_marker(results_dir)
    # Horovod: horovodrun and mpirun report a stop of their ranks as a failure (1), and horovodrun, when a
    # terminal's Ctrl-C reached it too, sometimes as success (0): neither is what happened. A file's time
    # comes from the kernel's coarse clock, which can be milliseconds behind time.time(): a second's slack
    if os.path.exists(marker) and os.path.getmtime(marker) >= since - 1:
        return EXIT_STOPPED
    return status


@contextlib.contextmanager
def forwarding_stop_signals(processes):
    """While inside, SIGTERM and SIGUSR1 go on to every process of `processes` still running."""

    def forward(signum, frame):
        for process in list(processes):
            if process.poll() is None:
                process.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def first_interrupt_waits(processes):
    """While inside, a first SIGINT does not end the wait for `processes`: a terminal's Ctrl-C reached them
    too (one process group), and they stop with a checkpoint; they get it from here only when they run in a
    group of their own. A second SIGINT raises KeyboardInterrupt, as Python's default does."""
    interrupts = []

    def interrupt(signum, frame):
        interrupts.append(signum)
        if len(interrupts) > 1:
            raise KeyboardInterrupt
        for process in list(processes):
            with contextlib.suppress(ProcessLookupError):  # gone meanwhile
                if process.poll() is None and os.getpgid(process.pid) != os.getpgrp():
                    process.send_signal(signum)

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background: SIGINT stays ignored
        yield
        return
    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stopped_with_parent():
    """A `preexec_fn` for subprocess.Popen: the child gets SIGTERM when the thread that starts it ends
    (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def arm() -> None:
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG: the signal when the starting thread ends
        if os.getppid() != parent:  # the parent died before the option was set
            os._exit(EXIT_STOPPED)

    return arm


def worker_environments(
    nproc: int, ports: list[int], gpus_per_worker: int = 0, hosts=("localhost",), node_index: int = 0
) -> list[dict]:
    """The environment additions of this node's workers: TF_CONFIG and, on GPUs, CUDA_VISIBLE_DEVICES
    and the GPUs each worker must see (GPUS_PER_PROCESS_ENV; without --gpus-per-worker, the
    workers inherit the caller's value).

    Workers are numbered host by host: node k's local worker j is task k * nproc + j, and worker 0
    of the first host is the chief.
    """
    addresses = [f"{host}:{port}" for host in hosts for port in ports]
    environments = []
    for local in range(nproc):
        env = {"TF_CONFIG": build_tf_config(addresses, node_index * nproc + local)}
        if gpus_per_worker:
            first = local * gpus_per_worker
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in range(first, first + gpus_per_worker))
            # what the worker checks TensorFlow's GPUs against
            env[GPUS_PER_PROCESS_ENV] = str(gpus_per_worker)
        environments.append(env)
    return environments


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("localhost", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def parse_hosts(parser, text: str) -> list[str]:
    """--hosts as a list, or argparse's error naming a host that TF_CONFIG's HOST:PORT cannot hold."""
    hosts = [host for host in text.split(",") if host]
    for host in hosts:
        if host_name_problem(host):
            parser.error(f"--hosts: {host_name_problem(host)}")
    return hosts


def start_workers(command: list[str], environments: list[dict]) -> list[subprocess.Popen]:
    """One worker per environment; a command that cannot be started is one line and exit status 2, the
    workers already started killed first."""
    workers = []
    for env in environments:
        try:
            workers.append(subprocess.Popen(command, env={**os.environ, **env}))
        except OSError as error:  # which() found it, but it cannot be started (not a program, gone meanwhile)
            for worker in workers:
                worker.kill()
                worker.wait()
            exit_if(
                f"the worker command {command[0]} cannot be started ({error.strerror or error}); "
                "give a program that runs after --"
            )
    return workers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=positive_int, required=True, help="worker processes to start")
    parser.add_argument(
        "--gpus-per-worker",
        type=non_negative_int,
        default=0,
        help="give worker i GPUs i*K .. i*K+K-1 (0: leave CUDA_VISIBLE_DEVICES alone)",
    )
    parser.add_argument("--hosts", default="localhost", help="comma-separated hosts of the job, in order")
    parser.add_argument(
        "--node-index", type=non_negative_int, default=0, help="this host's position in --hosts"
    )
    parser.add_argument(
        "--port-base",
        type=int,
        default=None,
        help="first worker port on every host (required with more than one host)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the worker command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the worker command after --, e.g. -- python train.py --launcher multiworker")
    if not shutil.which(command[0]):
        where = "not an executable file" if os.sep in command[0] else "not a program on PATH"
        exit_if(
            f"the worker command {command[0]} is {where}; give a program that exists after --, "
            "e.g. -- python train.py"
        )
    hosts = parse_hosts(parser, args.hosts)
    if not 0 <= args.node_index < len(hosts):
        parser.error(f"--node-index {args.node_index} is not a position in --hosts {args.hosts}")
    if len(hosts) > 1 and args.port_base is None:
        parser.error("with more than one host, give every node the same --port-base")
    if args.port_base is not None and not 1 <= args.port_base <= 65536 - args.nproc:
        parser.error(
            f"--port-base {args.port_base} leaves no room for {args.nproc} worker port(s): "
            f"give a port from 1024 to {65536 - args.nproc}"
        )
    ports = (
        free_ports(args.nproc)
        if args.port_base is None
        else list(range(args.port_base, args.port_base + args.nproc))
    )

    workers = start_workers(
        command, worker_environments(args.nproc, ports, args.gpus_per_worker, hosts, args.node_index)
    )
    code = 0
    with forwarding_stop_signals(workers), first_interrupt_waits(workers):
        try:
            while workers and code == 0:
                for worker in list(workers):
                    status = worker.poll()
                    if status is not None:
                        workers.remove(worker)
                        # A worker a signal killed (SIGKILL, the OOM killer) is a peer lost: EXIT_CLUSTER,
                        # what the others exit with once they notice, and what a retry with --resume mends
                        code = code or (status if status >= 0 else EXIT_CLUSTER)
                time.sleep(0.2)
        except KeyboardInterrupt:
            code = 130
        if code == EXIT_STOPPED:  # a coordinated stop: the others are leaving on their own
            deadline = time.monotonic() + 30
            while any(worker.poll() is None for worker in workers) and time.monotonic() < deadline:
                time.sleep(0.2)
        for worker in workers:  # one failed (or Ctrl-C): stop the rest rather than let them hang
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
    if code == EXIT_STOPPED:
        print(
            f"spawn: the workers stopped on a signal (status {code}); continue with --resume", file=sys.stderr
        )
    elif code:
        print(f"spawn: a worker exited with status {code}; stopped the others", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
