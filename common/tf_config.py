"""TF_CONFIG, the cluster description MultiWorkerMirroredStrategy reads: built for worker i of a
list of addresses (common/spawn.py, the Kubernetes Indexed Job) and checked before anything waits on it."""
from __future__ import annotations

import json


def build_tf_config(addresses: list[str], index: int) -> str:
    """TF_CONFIG for worker `index` of a cluster of workers at `addresses` (host:port)."""
    # Strategy: the cluster, and this worker's place in it
    return json.dumps({"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}})


def check_tf_config(text: str) -> dict:
    """TF_CONFIG parsed and checked before anything waits on it; a ValueError naming the value that
    cannot work (not JSON, no cluster, a task type or index outside the cluster, an address twice)."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}): {text!r}") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not cluster or not all(isinstance(v, list) for v in cluster.values()):
        raise ValueError(f'TF_CONFIG needs "cluster": {{"worker": ["host:port", ...]}}: {text!r}')
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ValueError(f'TF_CONFIG needs "task": {{"type": "worker", "index": I}}: {text!r}')
    kind, index = task["type"], task["index"]
    if kind not in cluster:
        raise ValueError(f"TF_CONFIG task type {kind!r} is not in its cluster ({', '.join(cluster)})")
    members = cluster[kind]
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(members):
        raise ValueError(f"TF_CONFIG task index {index!r} is outside its cluster's {len(members)} {kind} "
                         f"address(es) (0..{len(members) - 1}); give each process its own index")
    # Distributed: every task needs its own host:port
    addresses = [address for group in cluster.values() for address in group]
    twice = sorted({address for address in addresses if addresses.count(address) > 1})
    if twice:
        raise ValueError(f"TF_CONFIG lists {', '.join(map(str, twice))} more than once; every task needs its "
                         "own host:port")
    return config
