"""Unit tests of tf_recipes.cluster's Kubernetes Indexed Job: TF_CONFIG of a pod, and the wait until
every peer's name resolves (with a fake resolver and clock; the real thing runs in
tests/integration/test_k8s_in_docker.py)."""
import json
import socket

import pytest

from tf_recipes import cluster
from tf_recipes.contract import ClusterError, UserError

ENV = {"JOB_COMPLETION_INDEX": "1", "TF_RECIPES_WORKERS": "3", "TF_RECIPES_WORKER_PORT": "2222",
       "TF_RECIPES_WORKER_HOST_PATTERN": "job-{index}.job"}


def test_tf_config_lists_every_peer_and_this_pods_index():
    assert cluster.indexed_job_tf_config({"JOB_COMPLETION_INDEX": "0"}) is None  # not a pod of an Indexed Job
    config = json.loads(cluster.indexed_job_tf_config(ENV))
    assert config == {"cluster": {"worker": ["job-0.job:2222", "job-1.job:2222", "job-2.job:2222"]},
                      "task": {"type": "worker", "index": 1}}


@pytest.mark.parametrize("change,message", [
    ({"JOB_COMPLETION_INDEX": "3"}, "JOB_COMPLETION_INDEX=3 is not below TF_RECIPES_WORKERS=3"),
    ({"TF_RECIPES_WORKERS": "two"}, "TF_RECIPES_WORKERS='two' is not a whole number"),
    ({"TF_RECIPES_WORKER_HOST_PATTERN": "job.job"}, "must contain {index}"),
    ({"TF_RECIPES_WORKER_PORT": "0"}, "TF_RECIPES_WORKER_PORT=0 must be at least 1"),
])
def test_inconsistent_variables_name_the_variable(change, message):
    with pytest.raises(UserError, match=message.replace("{", r"\{").replace("}", r"\}")):
        cluster.indexed_job_tf_config({**ENV, **change})


class FakeNetwork:
    """Names that start resolving at given times; a clock that sleep() advances."""

    def __init__(self, appears_at):
        self.appears_at, self.now, self.lookups = appears_at, 0.0, []

    def resolve(self, host, port):
        self.lookups.append(host)
        if self.now < self.appears_at.get(host, float("inf")):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [("addr",)]

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def wait(network, hosts, timeout):
    cluster.wait_until_resolvable(hosts, timeout, resolve=network.resolve, clock=network.clock,
                                  sleep=network.sleep)


def test_waits_until_every_peer_resolves():
    network = FakeNetwork({"a": 0, "b": 7.5})
    wait(network, ["a", "b"], timeout=30)
    assert 7.5 <= network.now < 9 and network.lookups.count("a") == 1  # a resolved name is not asked again


def test_a_peer_that_never_resolves_fails_at_the_deadline_naming_it():
    network = FakeNetwork({"a": 0, "c": 2})
    with pytest.raises(ClusterError, match=r"peer\(s\) b did not resolve within 20 s"):
        wait(network, ["a", "b", "c"], timeout=20)
    assert network.now == 20
