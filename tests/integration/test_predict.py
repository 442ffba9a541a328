"""`invoke predict` and ci.bench.predict on exports written by real (tiny) training runs.

mnist-cnn (classification) and cityscapes-unet (segmentation, --benchmark data at a 64x128 crop) each
train a few steps; their RESULTS/export (one version, 1/) is what predict.py and the benchmark read.
Several versions, and what predict does with them: tests/recipes/mnist/test_mnist_export.py.
"""
import csv
import json
import os
import types

import numpy as np
import pytest
import tensorflow as tf

from export_checks import extra, newest_version, served_outputs, snapshot, write_test_images
from helpers import assert_ok, run_invoke, run_python

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("predict-runs")
    mnist, cityscapes = tmp / "mnist", tmp / "cityscapes"
    for process in (
            run_python("recipes/mnist-cnn/train.py", "--synthetic", "--max-steps", "3", "--results-dir", str(mnist)),
            run_python("recipes/cityscapes-unet/train.py", "--benchmark", "--preset", "tiny", "--max-steps", "2",
                       "--warmup-steps", "0", "--results-dir", str(cityscapes))):
        assert_ok(process)
    return {"mnist": mnist, "cityscapes": cityscapes}


def inputs_with_a_bad_file(folder, size, channels):
    """3 PNGs of the model's size, a JPEG of another size, and a file that is no image."""
    files, _ = write_test_images(folder, size, channels)
    jpeg = np.random.default_rng(1).integers(0, 256, (size[0] * 2, size[1] + 7, channels), dtype=np.uint8)
    tf.io.write_file(str(folder / "other.jpg"), tf.io.encode_jpeg(jpeg))
    (folder / "notes.txt").write_text("not an image")
    return sorted([*files, str(folder / "other.jpg")]), str(folder / "notes.txt")


def assert_one_line_error(process, bad, total):
    assert process.returncode == 2, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    assert f"unreadable: {bad} (" in process.stderr
    assert f"error: 1 of {total} input files could not be read" in process.stderr


def test_classification_writes_the_csv_and_names_the_unreadable_file(runs, tmp_path):
    good, bad = inputs_with_a_bad_file(tmp_path / "in", (28, 28), 1)
    out = tmp_path / "out"
    process = run_invoke("predict", "mnist-cnn", "--model", str(runs["mnist"] / "export"), "--input",
                         str(tmp_path / "in"), "--out", str(out), "--batch-size", "2", "--top-k", "4")
    assert_one_line_error(process, bad, 5)
    assert "predict: 2/5 files" in process.stdout and "predict: 5/5 files" in process.stdout
    assert sorted(os.listdir(out)) == [".tf-recipes-predict", "predictions.csv"]  # no temporary file left
    with open(out / "predictions.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["file"] for row in rows] == good
    assert list(rows[0]) == ["file", "class", "probability", "top_4", "model_version"]
    assert f"predict: model version 1 ({runs['mnist'] / 'export' / '1'})" in process.stdout
    served = served_outputs(newest_version(runs["mnist"]), good, tmp_path)
    for row, probabilities in zip(rows, served["probabilities"], strict=True):
        assert row["class"] == str(probabilities.argmax()) and row["model_version"] == "1"
        assert abs(float(row["probability"]) - probabilities.max()) < 1e-6
        top = [entry.split(":") for entry in row["top_4"].split()]
        assert [name for name, _ in top] == [str(i) for i in probabilities.argsort()[::-1][:4]]


def test_segmentation_writes_overlays_and_class_areas(runs, tmp_path):
    good, bad = inputs_with_a_bad_file(tmp_path / "in", (64, 128), 3)
    out = tmp_path / "out"
    process = run_python("recipes/cityscapes-unet/predict.py", "--model", str(runs["cityscapes"]), "--input",
                         str(tmp_path / "in"), "--out", str(out), "--batch-size", "3")
    assert_one_line_error(process, bad, 5)
    stems = sorted(os.path.splitext(os.path.basename(path))[0] for path in good)
    assert sorted(os.listdir(out)) == sorted([".tf-recipes-predict"] + [f"{stem}.png" for stem in stems]
                                             + [f"{stem}.json" for stem in stems])
    served = served_outputs(newest_version(runs["cityscapes"]), good, tmp_path)
    colours = np.array([c["colour"] for c in json.loads(extra(runs["cityscapes"], "classes.json"))])
    names = extra(runs["cityscapes"], "labels.txt").splitlines()
    for path, class_ids in zip(good, served["class_ids"], strict=True):
        stem = os.path.splitext(os.path.basename(path))[0]
        areas = json.loads((out / f"{stem}.json").read_text())
        assert areas["model_version"] == "1"
        expected = np.bincount(class_ids.ravel(), minlength=len(names)) / class_ids.size
        np.testing.assert_allclose([areas["class_fractions"][name] for name in names], expected)
        overlay = tf.io.decode_png(tf.io.read_file(str(out / f"{stem}.png"))).numpy()
        assert overlay.shape == (64, 128, 3)
        if path.endswith(".png"):  # at the model's size: the overlay is the mean of image and colour
            image = tf.io.decode_png(tf.io.read_file(path)).numpy().astype(int)
            np.testing.assert_array_equal(overlay, (image + colours[class_ids]) // 2)


@pytest.mark.parametrize("args,message", [
    (["--model", "{tmp}/nothing"], "--model {tmp}/nothing: no exported model there (no such folder)"),
    (["--model", "{cityscapes}"], "is a segmentation model of cityscapes-unet"),
    (["--model", "{cityscapes}/export/1/saved_model.pb"], "no exported model there (a file, not a folder)"),
    (["--input", "{tmp}/missing"], "no such file or folder"),
])
def test_a_wrong_model_or_input_is_one_line(runs, tmp_path, args, message):
    files, _ = write_test_images(tmp_path / "in", (28, 28), 1, count=1)
    given = {"--model": str(runs["mnist"]), "--input": files[0]}
    values = [value.format(tmp=tmp_path, cityscapes=runs["cityscapes"]) for value in args[1::2]]
    given.update(dict(zip(args[::2], values, strict=True)))
    process = run_python("recipes/mnist-cnn/predict.py", *[item for pair in given.items() for item in pair],
                         "--out", str(tmp_path / "out"))
    assert process.returncode == 2 and "Traceback" not in process.stderr
    assert process.stderr.strip().splitlines()[-1].startswith("error: ")
    assert message.format(tmp=tmp_path) in process.stderr


def test_an_export_folder_without_a_version_is_one_line_naming_it(runs, tmp_path):
    """RESULTS/export holding no version folder (a user's notes, a non-integer folder, an integer-named
    folder without saved_model.pb): one line naming the folder and what to give instead."""
    files, _ = write_test_images(tmp_path / "in", (28, 28), 1, count=1)
    export = tmp_path / "results" / "export"
    (export / "7").mkdir(parents=True)
    (export / "7" / "notes.txt").write_text("not a model\n")
    (export / "latest").mkdir()
    (export / "README.txt").write_text("the exports of the nightly run\n")
    before = snapshot(tmp_path)
    for model in (export, tmp_path / "results"):  # the export folder, or the results folder that holds it
        process = run_python("recipes/mnist-cnn/predict.py", "--model", str(model), "--input", files[0],
                             "--out", str(tmp_path / "out"))
        assert_refused(process, f"--model {model}: no exported model there: {export} holds no version folder "
                                f"(1/, 2/, ... with saved_model.pb in it); point --model at RESULTS/export of a run")
        assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def assert_refused(process, message):
    assert process.returncode == 2, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    lines = process.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and message in lines[-1], process.stderr[-3000:]


@pytest.mark.parametrize("out", ["in", "in/overlays", "link-to-in", "."])
def test_an_out_overlapping_the_input_is_refused_and_the_inputs_stay_byte_identical(runs, tmp_path, out):
    write_test_images(tmp_path / "in", (64, 128), 3, count=2)
    (tmp_path / "link-to-in").symlink_to(tmp_path / "in")
    before = snapshot(tmp_path)
    process = run_python("recipes/cityscapes-unet/predict.py", "--model", str(runs["cityscapes"]), "--input",
                         str(tmp_path / "in"), "--out", str(tmp_path / out))
    assert_refused(process, "overlap")
    assert snapshot(tmp_path) == before and not (tmp_path / "in" / "overlays").exists()


def test_two_inputs_with_one_output_name_are_refused_before_anything_is_written(runs, tmp_path):
    files, arrays = write_test_images(tmp_path / "in", (64, 128), 3, count=1)
    os.rename(files[0], tmp_path / "in" / "a.png")
    tf.io.write_file(str(tmp_path / "in" / "a.jpg"), tf.io.encode_jpeg(arrays[0]))
    before = snapshot(tmp_path)
    process = run_python("recipes/cityscapes-unet/predict.py", "--model", str(runs["cityscapes"]), "--input",
                         str(tmp_path / "in"), "--out", str(tmp_path / "out"))
    assert_refused(process, f"{tmp_path / 'in' / 'a.jpg'} and {tmp_path / 'in' / 'a.png'} would both be written")
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def test_an_out_holding_other_files_is_refused_and_one_a_predict_run_wrote_is_reused(runs, tmp_path):
    files, _ = write_test_images(tmp_path / "in", (28, 28), 1, count=2)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "predictions.csv").write_text("someone else's table\n")
    before = snapshot(tmp_path)
    args = ["recipes/mnist-cnn/predict.py", "--model", str(runs["mnist"]), "--input", str(tmp_path / "in"),
            "--out", str(tmp_path / "out")]
    assert_refused(run_python(*args), "already holds files no predict run wrote (such as predictions.csv)")
    assert snapshot(tmp_path) == before
    (tmp_path / "out" / ".tf-recipes-predict").write_text("")  # as a previous predict run leaves it
    assert_ok(run_python(*args))
    with open(tmp_path / "out" / "predictions.csv") as handle:
        assert [row["file"] for row in csv.DictReader(handle)] == files


def test_each_unreadable_kind_of_input_is_one_line_and_the_others_are_predicted(runs, tmp_path):
    files, _ = write_test_images(tmp_path / "in", (28, 28), 1, count=2)
    (tmp_path / "in" / "broken.png").symlink_to(tmp_path / "gone.png")
    (tmp_path / "in" / "empty.png").write_bytes(b"")
    (tmp_path / "in" / "garbage.png").write_bytes(b"\x89PNG not really")
    out = tmp_path / "out"
    process = run_python("recipes/mnist-cnn/predict.py", "--model", str(runs["mnist"]), "--input",
                         str(tmp_path / "in"), "--out", str(out), "--batch-size", "5")
    assert process.returncode == 2, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    lines = process.stderr.strip().splitlines()
    for name in ("broken.png", "empty.png", "garbage.png"):
        assert len([line for line in lines if line.startswith(f"unreadable: {tmp_path / 'in' / name} (")]) == 1
    assert lines[-1].startswith("error: 3 of 5 input files could not be read")
    with open(out / "predictions.csv") as handle:
        assert [row["file"] for row in csv.DictReader(handle)] == files


def test_the_csv_keeps_the_finished_batches_when_a_later_batch_fails(runs, tmp_path, monkeypatch):
    from tf_recipes.operations import predicting

    files, _ = write_test_images(tmp_path / "in", (28, 28), 1, count=4)
    calls = []
    serve = predicting.Export.__call__

    def failing_on_the_second_batch(model, blobs):
        calls.append(len(blobs))
        if len(calls) == 2:
            raise RuntimeError("simulated failure")
        return serve(model, blobs)

    monkeypatch.setattr(predicting.Export, "__call__", failing_on_the_second_batch)
    out = tmp_path / "out"
    args = types.SimpleNamespace(model=str(runs["mnist"]), input=str(tmp_path / "in"), out=str(out), batch_size=2,
                                 top_k=3)
    with pytest.raises(RuntimeError, match="simulated failure"):
        predicting.run(args, "classification")
    assert not (out / "predictions.csv").exists()
    with open(out / "predictions.csv.partial") as handle:
        assert [row["file"] for row in csv.DictReader(handle)] == files[:2]


def test_the_benchmark_compares_predict_with_keras_predict_on_the_same_images(runs, tmp_path):
    report_file = tmp_path / "predict.json"
    process = run_python("-m", "ci.bench.predict", "--results", str(runs["mnist"]), "--images", "32",
                         "--batch-size", "8", "--rounds", "2", "--json", str(report_file))
    assert_ok(process)
    report = json.loads(report_file.read_text())
    assert (report["recipe"], report["images"], report["batch_size"]) == ("mnist-cnn", 32, 8)
    assert len(report["export_rounds"]) == len(report["keras_rounds"]) == 2
    assert report["export_images_per_sec"] > 0 and report["keras_predict_images_per_sec"] > 0
    ratio = report["export_images_per_sec"] / report["keras_predict_images_per_sec"]
    assert report["ratio"] == pytest.approx(ratio, rel=1e-3)  # the rates are rounded to 0.1
    assert report["command"].startswith("python -m ci.bench.predict --results")
