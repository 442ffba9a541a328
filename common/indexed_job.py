"""The cluster of a plain Kubernetes Indexed Job: TF_CONFIG from JOB_COMPLETION_INDEX and peer names.

A `batch/v1` Job with `completionMode: Indexed` needs no operator. Kubernetes gives pod i the
variable JOB_COMPLETION_INDEX=i and the hostname `<job>-<i>`; a headless Service named in the pod's
`subdomain` makes every pod resolvable as `<job>-<i>.<service>` (already before it is Ready, with
`publishNotReadyAddresses: true`). The manifest (commands/k8s.py) adds what the pod cannot know:

    TF_RECIPES_WORKERS              how many workers (the Job's completions)
    TF_RECIPES_WORKER_HOST_PATTERN  the peers' names, "{index}" standing for the index
    TF_RECIPES_WORKER_PORT          the port every worker listens on
    TF_RECIPES_RESOLVE_TIMEOUT      seconds to wait until every peer's name resolves

The multiworker launcher turns these into TF_CONFIG, the third cluster source next to TF_CONFIG
itself and SLURM. It first waits until every peer's name resolves: a pod whose peers are still being
scheduled would otherwise fail to connect, and one whose peer never comes would wait in the
strategy's constructor for up to an hour. Nothing here imports TensorFlow.
"""
from __future__ import annotations

import socket
import time

from tf_recipes.contract import INDEXED_JOB_DEFAULT_RESOLVE_TIMEOUT as DEFAULT_RESOLVE_TIMEOUT
from tf_recipes.contract import INDEXED_JOB_HOST_PATTERN as HOST_PATTERN
from tf_recipes.contract import INDEXED_JOB_INDEX as INDEX
from tf_recipes.contract import INDEXED_JOB_PORT as PORT
from tf_recipes.contract import INDEXED_JOB_RESOLVE_TIMEOUT as RESOLVE_TIMEOUT
from tf_recipes.contract import INDEXED_JOB_WORKERS as WORKERS
from tf_recipes.tf_config import build_tf_config


class IndexedJobConfigError(ValueError):
    """The Indexed-Job variables are inconsistent; the message names the variable and its value."""


def is_indexed_job(environ) -> bool:
    """True in a pod of an Indexed Job rendered by `invoke k8s --kind job`."""
    return INDEX in environ and WORKERS in environ


def _whole(environ, name: str, minimum: int) -> int:
    text = environ.get(name, "")
    try:
        value = int(text)
    except ValueError:
        raise IndexedJobConfigError(f"{name}={text!r} is not a whole number") from None
    if value < minimum:
        raise IndexedJobConfigError(f"{name}={value} must be at least {minimum}")
    return value


def worker_hosts(environ) -> list[str]:
    """Every worker's DNS name, in index order."""
    workers = _whole(environ, WORKERS, 1)
    pattern = environ.get(HOST_PATTERN, "")
    if "{index}" not in pattern:
        raise IndexedJobConfigError(f"{HOST_PATTERN}={pattern!r} must contain {{index}}, e.g. job-{{index}}.job")
    return [pattern.replace("{index}", str(i)) for i in range(workers)]


def tf_config(environ) -> str:
    """The TF_CONFIG of this pod: every worker at `<name>:<port>`, this one at JOB_COMPLETION_INDEX."""
    hosts = worker_hosts(environ)
    index = _whole(environ, INDEX, 0)
    if index >= len(hosts):
        raise IndexedJobConfigError(f"{INDEX}={index} is not below {WORKERS}={len(hosts)}")
    port = _whole(environ, PORT, 1)
    return build_tf_config([f"{host}:{port}" for host in hosts], index)  # Strategy: every worker, this one at its index


def wait_until_resolvable(hosts, timeout: float, *, resolve=socket.getaddrinfo, clock=time.monotonic,
                          sleep=time.sleep, interval: float = 1.0) -> None:
    """Return once every name in `hosts` resolves; raise ClusterError naming the rest after `timeout` s."""
    deadline = clock() + timeout
    waiting = list(hosts)
    while True:
        for host in list(waiting):
            try:
                resolve(host, None)
                waiting.remove(host)
            except (socket.gaierror, UnicodeError):
                pass
        if not waiting:
            return
        if clock() >= deadline:
            from tf_recipes.contract import ClusterError  # exit status 4: the cluster did not form

            raise ClusterError(f"peer(s) {', '.join(waiting)} did not resolve within {timeout:g} s: check that "
                               "their pods were scheduled and that the headless Service names them")
        sleep(min(interval, max(deadline - clock(), 0.0)))


def tf_config_when_peers_resolve(environ) -> str:
    """TF_CONFIG for this pod, once every peer's name resolves (see `wait_until_resolvable`)."""
    config = tf_config(environ)
    text = environ.get(RESOLVE_TIMEOUT) or str(DEFAULT_RESOLVE_TIMEOUT)
    try:
        timeout = float(text)
    except ValueError:
        raise IndexedJobConfigError(f"{RESOLVE_TIMEOUT}={text!r} is not a number of seconds") from None
    wait_until_resolvable(worker_hosts(environ), timeout)  # Distributed: every peer's name resolves first
    return config
