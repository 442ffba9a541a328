"""Two nodes without a scheduler, for real over a network: the second node is a network namespace
with its own address, joined to this one by a veth pair. On each "host" a user's command
`invoke run --hosts A,B --node-index I` starts its worker; together they form one
MultiWorkerMirroredStrategy job and must train one model."""
import os
import subprocess
import sys

import pytest

from helpers import REPO, read_results

# In the full tier only: the night's; every push runs one multiworker job over the SLURM cluster's two nodes
# (test_slurm_cluster.py).
pytestmark = [pytest.mark.slow, pytest.mark.full]
NAMESPACE, HOST_A, HOST_B = "tfr-node-b", "10.231.7.1", "10.231.7.2"


def ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture
def second_host():
    """A network namespace reachable at HOST_B from this host's HOST_A (needs root and iproute2)."""
    ip("netns", "del", NAMESPACE)
    ip("link", "del", "tfr-veth-a")
    steps = [("netns", "add", NAMESPACE),
             ("link", "add", "tfr-veth-a", "type", "veth", "peer", "name", "tfr-veth-b"),
             ("link", "set", "tfr-veth-b", "netns", NAMESPACE),
             ("addr", "add", f"{HOST_A}/24", "dev", "tfr-veth-a"),
             ("link", "set", "tfr-veth-a", "up"),
             ("-n", NAMESPACE, "addr", "add", f"{HOST_B}/24", "dev", "tfr-veth-b"),
             ("-n", NAMESPACE, "link", "set", "tfr-veth-b", "up"),
             ("-n", NAMESPACE, "link", "set", "lo", "up")]
    for step in steps:
        result = ip(*step)
        if result.returncode != 0:
            ip("netns", "del", NAMESPACE)
            message = f"cannot make a second network host (ip {' '.join(step)}: {result.stderr.strip()})"
            if os.environ.get("TF_RECIPES_STRICT") == "1":
                pytest.fail(message)
            pytest.skip(message)
    yield ["ip", "netns", "exec", NAMESPACE]
    ip("netns", "del", NAMESPACE)
    ip("link", "del", "tfr-veth-a")


def test_two_hosts_train_one_model(tmp_path, second_host):
    def node(index, prefix=()):
        command = [*prefix, sys.executable, "-m", "invoke", "run", "mnist-cnn", "--gpus", "0", "--cpu-replicas", "1",
                   "--launcher", "multiworker", "--hosts", f"{HOST_A},{HOST_B}", "--node-index", str(index),
                   "--port-base", "23456", "--runtime", "local", "--results-dir", str(tmp_path / f"node{index}"),
                   "--", "--synthetic", "--max-steps", "6", "--log-every", "3"]
        return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    processes = [node(0), node(1, second_host)]
    try:
        outputs = [process.communicate(timeout=300)[0] for process in processes]
    finally:
        for process in processes:
            process.kill()
    assert [process.returncode for process in processes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    results = read_results(tmp_path / "node0")  # the chief is node 0's first worker
    assert (results["workers"], results["replicas"], results["nodes"]) == (2, 2, 2)
    assert len(set(results["replica_fingerprints"])) == 1
    assert not (tmp_path / "node1" / "results.json").exists()
