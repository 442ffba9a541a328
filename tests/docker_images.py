"""A Docker engine that answers, and the CPU base image built in it: fixtures for every test that
runs a container (made available to tests/integration by its conftest.py)."""
import os
import subprocess

import pytest

from helpers import assert_ok, made_once, run_invoke

BUILD_TIMEOUT = 2400  # a cold CPU base without a Horovod wheel compiles Horovod: ~10 minutes on 2 cores


def docker(*args, **kwargs):
    return subprocess.run(["docker", *args], capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="session")
def engine():
    if docker("info").returncode != 0:
        message = "no Docker engine answers: run `bash ci/docker-engine.sh` (as root)"
        if os.environ.get("TF_RECIPES_STRICT") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return {}


@pytest.fixture(scope="session")
def cpu_base(engine):
    """invoke images.bootstrap (once per machine), then images.cpu (cached after the first build; with
    the Horovod wheel of INVOKE_TF_RECIPES_HOROVOD_WHEEL, which ci/test.sh sets, as ci/prepare-images.sh).

    Also sets the memlock choice for the runs: NVIDIA's flags ask for an unlimited memlock, which
    some sandboxes refuse to raise; use the recommended flag wherever the host allows it."""
    with made_once("cpu-base"):
        if docker("image", "inspect", "tf-recipes/debian:bookworm").returncode != 0:
            assert_ok(run_invoke("images.bootstrap", timeout=BUILD_TIMEOUT))
        assert_ok(run_invoke("images.cpu", timeout=BUILD_TIMEOUT))
    probe = docker("run", "--rm", "--ulimit", "memlock=-1", "tf-recipes/debian:bookworm", "true")
    engine["INVOKE_TF_RECIPES_MEMLOCK"] = "-1" if probe.returncode == 0 else ""
    return "tf-recipes/cpu-base:latest"


