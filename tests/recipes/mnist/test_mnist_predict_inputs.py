"""`invoke predict` on a folder a careless user hands it: a FIFO, a socket or a dangling link among the
photos is named on one line and skipped, never opened, and the other photos are predicted. The model is
a small export written here (tf_recipes.export.write_export, as a training run writes it), and every run is
a subprocess with a timeout, so that a reader that blocks fails the test instead of hanging the suite."""
import csv
import os
import socket

import keras
import pytest

from tf_recipes import export
from error_checks import without_tf_log
from export_checks import write_test_images
from helpers import run_invoke


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    keras.utils.set_random_seed(0)
    plain = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(10, activation="softmax")])
    base = tmp_path_factory.mktemp("results") / export.EXPORT_DIR
    spec = export.ExportSpec(task=export.CLASSIFICATION, class_names=[str(digit) for digit in range(10)],
                             image_size=(28, 28), channels=1, build=lambda: plain)
    export.write_export(str(base / "1"), plain, spec.checked(), "mnist-cnn")
    return base


def test_a_fifo_a_socket_and_a_dangling_link_in_the_folder_are_named_and_the_photos_predicted(model, tmp_path):
    photos = tmp_path / "photos"
    paths, _ = write_test_images(photos, (28, 28), 1, count=2)
    os.mkfifo(photos / "pipe.png")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(photos / "socket.png"))
    (photos / "gone.png").symlink_to(tmp_path / "nowhere.png")
    out = tmp_path / "predictions"
    try:
        process = run_invoke("predict", "mnist-cnn", "--model", str(model), "--input", str(photos),
                             "--out", str(out), timeout=180)
    finally:
        server.close()
    assert process.returncode == 2, process.stdout + process.stderr
    lines = [line for line in without_tf_log(process.stderr).splitlines() if line.strip()]
    assert lines == [f"unreadable: {photos}/gone.png (a dangling symbolic link, not a regular file)",
                     f"unreadable: {photos}/pipe.png (a named pipe (FIFO), not a regular file)",
                     f"unreadable: {photos}/socket.png (a socket, not a regular file)",
                     f"error: 3 of 5 input files could not be read (named above); the predictions of the others "
                     f"are in {out}"], process.stderr
    with open(out / "predictions.csv") as handle:
        assert [row["file"] for row in csv.DictReader(handle)] == sorted(paths)
