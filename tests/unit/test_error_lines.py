"""The error-line rule the quick-start tests hold a successful run to (tests/error_checks.py): it
catches TensorFlow's CUDA start-up errors in both stacks' log formats, and lets its info lines and
our own output through."""
import pytest

from error_checks import error_lines

# Printed by TensorFlow's CUDA build on a machine without a GPU (TF 2.21 on Debian 13; TF 2.17.1 here).
CUDA_ERRORS = [
    "E0000 00:00:1795556880.213870    7976 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)",
    "2026-11-26 04:02:59.831340: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:8454] Unable to "
    "register cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been registered",
    "ERROR: something failed",
    "Traceback (most recent call last):",
]
# Printed by tensorflow-cpu, and by a successful run.
CLEAN = [
    "2026-11-26 04:04:31.138422: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.",
    "I0000 00:00:1795556880.213870    7976 port.cc:153] oneDNN custom operations are on.",
    "results: /home/user/tf-recipes/results/mnist-cnn/20261126-040000/results.json",
]


@pytest.mark.parametrize("line", CUDA_ERRORS)
def test_an_error_line_is_caught(line):
    assert error_lines("\n".join([*CLEAN, line])) == [line]


def test_clean_output_has_no_error_line():
    assert error_lines("\n".join(CLEAN)) == []
