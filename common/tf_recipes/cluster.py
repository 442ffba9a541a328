"""TF_CONFIG, the cluster MultiWorkerMirroredStrategy reads: built for worker i of a list of addresses
(tf_recipes.operations.spawn, a Kubernetes Indexed Job's contract.INDEXED_JOB_* variables) and checked before
anything waits on it. Imports no TensorFlow.
"""

from __future__ import annotations

import contextlib
import json
from socket import gaierror, getaddrinfo
from time import monotonic, sleep

from tf_recipes.contract import INDEXED_JOB_DEFAULT_RESOLVE_TIMEOUT, INDEXED_JOB_HOST_PATTERN, ClusterError
from tf_recipes.contract import INDEXED_JOB_INDEX, INDEXED_JOB_PORT, INDEXED_JOB_RESOLVE_TIMEOUT, UserError
from tf_recipes.contract import INDEXED_JOB_WORKERS


def build_tf_config(addresses: list[str], index: int) -> str:
    """TF_CONFIG for worker `index` of a cluster of workers at `addresses` (host:port)."""
    # Strategy: the cluster, and this worker's place in it
    return json.dumps({"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}})


def check_tf_config(text: str) -> dict:
    """TF_CONFIG parsed, or a UserError naming what cannot work."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(f"TF_CONFIG is not valid JSON ({error}): {text!r}") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not cluster or not all(isinstance(v, list) for v in cluster.values()):
        raise UserError(f'TF_CONFIG needs "cluster": {{"worker": ["host:port", ...]}}: {text!r}')
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise UserError(f'TF_CONFIG needs "task": {{"type": "worker", "index": I}}: {text!r}')
    kind, index = task["type"], task["index"]
    if kind not in cluster:
        raise UserError(f"TF_CONFIG task type {kind!r} is not in its cluster ({', '.join(cluster)})")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(cluster[kind]):
        raise UserError(
            f"TF_CONFIG task index {index!r} is outside its cluster's {len(cluster[kind])} "
            f"{kind} address(es) (0..{len(cluster[kind]) - 1}); give each process its own index"
        )
    addresses = [address for group in cluster.values() for address in group]
    # Distributed: every task needs its own host:port
    if twice := sorted({address for address in addresses if addresses.count(address) > 1}):
        listed = ", ".join(map(str, twice))
        raise UserError(f"TF_CONFIG lists {listed} more than once; every task needs its own host:port")
    return config


def _whole(environ, name: str, minimum: int) -> int:
    text = environ.get(name, "")
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"{name}={text!r} is not a whole number") from None
    if value < minimum:
        raise UserError(f"{name}={value} must be at least {minimum}")
    return value


def indexed_job_tf_config(environ, wait: bool = False) -> str | None:
    """TF_CONFIG of an Indexed Job's pod (else None); with `wait`, once every peer's name resolves."""
    if INDEXED_JOB_INDEX not in environ or INDEXED_JOB_WORKERS not in environ:
        return None
    workers = _whole(environ, INDEXED_JOB_WORKERS, 1)
    pattern = environ.get(INDEXED_JOB_HOST_PATTERN, "")
    if "{index}" not in pattern:
        raise UserError(
            f"{INDEXED_JOB_HOST_PATTERN}={pattern!r} must contain {{index}}, e.g. job-{{index}}.job"
        )
    index = _whole(environ, INDEXED_JOB_INDEX, 0)
    if index >= workers:
        raise UserError(f"{INDEXED_JOB_INDEX}={index} is not below {INDEXED_JOB_WORKERS}={workers}")
    port = _whole(environ, INDEXED_JOB_PORT, 1)
    hosts = [pattern.replace("{index}", str(i)) for i in range(workers)]
    if wait:
        text = environ.get(INDEXED_JOB_RESOLVE_TIMEOUT) or str(INDEXED_JOB_DEFAULT_RESOLVE_TIMEOUT)
        try:
            timeout = float(text)
        except ValueError:
            raise UserError(f"{INDEXED_JOB_RESOLVE_TIMEOUT}={text!r} is not a number of seconds") from None
        wait_until_resolvable(hosts, timeout)  # Distributed: every peer's name resolves first
    # Strategy: every worker, this one at its index
    return build_tf_config([f"{host}:{port}" for host in hosts], index)


def wait_until_resolvable(
    hosts, timeout: float, *, resolve=getaddrinfo, clock=monotonic, sleep=sleep, interval: float = 1.0
) -> None:
    """Return once every name in `hosts` resolves; a ClusterError naming the rest after `timeout` s."""
    deadline, waiting = clock() + timeout, list(hosts)
    while True:
        for host in list(waiting):
            with contextlib.suppress(gaierror, UnicodeError):
                resolve(host, None)
                waiting.remove(host)
        if not waiting:
            return
        if clock() >= deadline:
            raise ClusterError(
                f"peer(s) {', '.join(waiting)} did not resolve within {timeout:g} s: check "
                "that their pods were scheduled and that the headless Service names them"
            )
        sleep(min(interval, max(deadline - clock(), 0.0)))
