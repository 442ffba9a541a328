"""What a run stopped by bad data must look like: exit 2, one `error:` line naming the culprit,
no traceback, and nothing written that a later run could mistake for a result."""
import os
import re

# TensorFlow's own C++ log lines are not ours. TF 2.17 writes "2026-11-24 10:00:00.123: I file.cc:N] ...";
# TF 2.21 writes absl's "I0000 00:00:1795556880.213870    7976 port.cc:153] ..." (oneDNN, the CPU
# instructions, and on a machine without a GPU "failed call to cuInit"), mostly before absl is
# initialised, where no environment variable silences it (TF_CPP_MIN_LOG_LEVEL=3 included, measured).
TF_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] |^WARNING: All log messages before absl"
                         r"|^[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] "
                         r"|^To enable the following instructions: .*, in other operations, rebuild TensorFlow")


# What a successful run must not print (the project's rule): a line that starts with "E" (absl's
# "E0000 ... cuda_platform.cc:52] failed call to cuInit" of TF 2.21), TF 2.17's "DATE TIME: E file.cc:N] ..."
# ("Unable to register cuDNN factory"), a line that says ERROR, or a traceback.
ERROR_LINE = re.compile(r"^E|^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: E |ERROR|^Traceback ")


def error_lines(text: str) -> list[str]:
    """The lines of `text` that read as errors (ERROR_LINE)."""
    return [line for line in text.splitlines() if ERROR_LINE.search(line)]


def without_tf_log(text: str) -> str:
    """`text` without TensorFlow's own C++ log lines (TF_LOG_LINE), for checks of what we print."""
    return "\n".join(line for line in text.splitlines() if not TF_LOG_LINE.match(line))


def assert_one_error_line(process, *needles, foreign=None) -> str:
    """Returns the error line after checking the exit status (2), that there is no traceback, and that
    stderr holds one `error:` line (TensorFlow's log aside) with every needle in it.
    `foreign`: a regex for other lines a C library writes to stderr itself (libjpeg's warnings)."""
    assert process.returncode == 2, (
        f"exit {process.returncode}\n--- stdout ---\n{process.stdout[-3000:]}\n"
        f"--- stderr ---\n{process.stderr[-6000:]}")
    assert "Traceback" not in process.stderr, process.stderr[-6000:]
    ours = [line for line in process.stderr.splitlines() if line.strip() and not TF_LOG_LINE.match(line)
            and not (foreign and re.match(foreign, line))]
    assert len(ours) == 1 and ours[0].startswith("error: "), process.stderr[-6000:]
    for needle in needles:
        assert str(needle) in ours[0], f"{needle!r} not in: {ours[0]}"
    return ours[0]


def assert_one_line_error(process, results_dir, *needles, foreign=None):
    """Returns the error line after checking the exit status, stderr (assert_one_error_line) and the results
    folder."""
    line = assert_one_error_line(process, *needles, foreign=foreign)
    # TensorBoard curves of the steps that did train are a log, like stdout; anything else is not.
    left = [os.path.join(folder, name) for folder, _, files in os.walk(results_dir) for name in files
            if "tensorboard" not in os.path.relpath(folder, results_dir).split(os.sep)]
    assert not left, f"written despite the error: {left}"
    return line
