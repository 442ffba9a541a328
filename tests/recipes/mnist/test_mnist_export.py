"""RESULTS/export as a TF Serving model base (common/tf_recipes/export.py): every run adds version N+1 and leaves
the others as they are, a version appears whole or not at all, predict.py takes the newest, and what
the project did not make in RESULTS/export is never touched.

One results folder lives through a history of small mnist-cnn runs (--synthetic, a few steps each;
each later one --resume with more --max-steps, as a user trains further): a first run, user files,
a second run, predictions, a run killed while it writes its version, predictions again, a fourth run.
The tests read what those runs wrote. The refusals each train in a fresh results folder.
"""
import csv
import os
import sys

import numpy as np
import pytest

from error_checks import without_tf_log
from export_checks import served_outputs, snapshot, version_folders, write_test_images
from helpers import assert_ok, run_invoke, run_python

TRAIN = "recipes/mnist-cnn/train.py"
PREDICT = "recipes/mnist-cnn/predict.py"
MARKER = ".tf-recipes-export"  # tf_recipes.export.PARTIAL_MARKER, spelled out: what the test expects on disk

# train.py, killed (SIGKILL) as its export writes the first file of assets.extra: the SavedModel of the
# new version is on disk, its extras are not, and nothing has been renamed yet.
KILLED_WHILE_EXPORTING = """
import os, runpy, signal, sys
from tf_recipes import export
write = export.write_atomically
def write_or_die(path, data):
    if os.path.basename(os.path.dirname(path)) == export.EXTRA_DIR:
        os.kill(os.getpid(), signal.SIGKILL)
    write(path, data)
export.write_atomically = write_or_die
sys.argv = [sys.argv[1], *sys.argv[2:]]
sys.path.insert(0, os.path.dirname(sys.argv[0]))  # the recipe's own modules, as `python train.py` finds them
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def train(results, steps, *extra, killed=False):
    args = ["--synthetic", "--max-steps", str(steps), "--results-dir", str(results), *extra]
    if killed:
        return run_python("-c", KILLED_WHILE_EXPORTING, TRAIN, *args)
    return run_python(TRAIN, *args)


def user_entries(export):
    """What a user keeps in RESULTS/export: notes, a folder of their own, and a folder named like the
    project's temporary ones but without its marker (it holds a copy of a version's SavedModel)."""
    (export / "README.txt").write_text("version 1: the baseline\n")
    (export / "notes").mkdir()
    (export / "notes" / "eval.txt").write_text("accuracy by hand\n")
    (export / ".partial-mine").mkdir()
    (export / ".partial-mine" / "saved_model.pb").write_bytes((export / "1" / "saved_model.pb").read_bytes())
    return {name: snapshot(export / name) for name in ("README.txt", "notes", ".partial-mine")}


def predict_csv(process, out):
    assert_ok(process)
    with open(out / "predictions.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export-history")
    results, export = tmp / "results", tmp / "results" / "export"
    files, _ = write_test_images(tmp / "digits", (28, 28), 1, count=4)
    seen = {"files": files, "results": results, "export": export, "tmp": tmp}

    assert_ok(train(results, 2))
    seen["after_first"] = sorted(os.listdir(export))
    seen["version_1"] = snapshot(export / "1")
    seen["user"] = user_entries(export)

    seen["second"] = train(results, 4, "--resume")
    assert_ok(seen["second"])
    seen["after_second"] = sorted(os.listdir(export))
    seen["version_1_after_second"] = snapshot(export / "1")
    seen["version_2"] = snapshot(export / "2")
    seen["predict_newest"] = run_invoke("predict", "mnist-cnn", "--model", str(export), "--input",
                                        str(tmp / "digits"), "--out", str(tmp / "newest"))
    seen["predict_version_1"] = run_python(PREDICT, "--model", str(export / "1"), "--input", str(tmp / "digits"),
                                           "--out", str(tmp / "first"))

    seen["killed"] = train(results, 6, "--resume", killed=True)
    seen["after_killed"] = sorted(os.listdir(export))
    seen["partials"] = {name: sorted(os.path.relpath(os.path.join(root, entry), export / name)
                                     for root, folders, files in os.walk(export / name) for entry in folders + files)
                        for name in seen["after_killed"] if name.startswith(".partial-") and name != ".partial-mine"}
    seen["predict_after_killed"] = run_python(PREDICT, "--model", str(results), "--input", str(tmp / "digits"),
                                              "--out", str(tmp / "after-killed"))

    seen["fourth"] = train(results, 8, "--resume")
    assert_ok(seen["fourth"])
    seen["after_fourth"] = sorted(os.listdir(export))
    return seen


def test_two_runs_into_one_results_folder_give_versions_1_and_2_and_leave_1_byte_identical(history):
    assert history["after_first"] == ["1"]
    assert sorted(os.listdir(history["export"] / "1")) == [
        "assets", "assets.extra", "fingerprint.pb", "saved_model.pb", "variables"]
    assert sorted(os.listdir(history["export"] / "1" / "assets.extra")) == ["labels.txt", "model.json"]
    assert version_folders(history["results"])[:2] == ["1", "2"]
    assert f"export: {history['export'] / '2'} (signature serving_default" in history["second"].stdout
    assert history["version_1_after_second"] == history["version_1"]
    assert sorted(history["after_second"]) == sorted(["1", "2", "README.txt", "notes", ".partial-mine"])


def test_predict_uses_the_newest_version_and_records_which(history, tmp_path):
    rows = predict_csv(history["predict_newest"], history["tmp"] / "newest")
    assert f"predict: model version 2 ({history['export'] / '2'})" in history["predict_newest"].stdout
    assert [row["file"] for row in rows] == history["files"]
    assert {row["model_version"] for row in rows} == {"2"}
    newest = served_outputs(history["export"] / "2", history["files"], tmp_path)
    first = served_outputs(history["export"] / "1", history["files"], tmp_path)
    assert not np.allclose(newest["probabilities"], first["probabilities"])  # two more steps moved the weights
    for row, probabilities in zip(rows, newest["probabilities"], strict=True):
        assert row["class"] == str(probabilities.argmax())
        assert abs(float(row["probability"]) - probabilities.max()) < 1e-6


def test_a_version_folder_given_as_model_is_the_one_used(history, tmp_path):
    rows = predict_csv(history["predict_version_1"], history["tmp"] / "first")
    assert {row["model_version"] for row in rows} == {"1"}
    first = served_outputs(history["export"] / "1", history["files"], tmp_path)
    assert [row["class"] for row in rows] == [str(p.argmax()) for p in first["probabilities"]]


def test_a_run_killed_while_exporting_leaves_no_version_and_its_folder_is_ignored(history):
    assert history["killed"].returncode == -9, history["killed"].stderr[-3000:]
    assert [name for name in history["after_killed"] if name.isdigit()] == ["1", "2"]  # no half version 3
    (entries,) = history["partials"].values()  # the killed run's folder, with the project's marker
    assert MARKER in entries
    assert "version/saved_model.pb" in entries  # a SavedModel a server would load, were it a version
    assert [entry for entry in entries if entry.startswith("version/assets.extra")] == ["version/assets.extra"]
    rows = predict_csv(history["predict_after_killed"], history["tmp"] / "after-killed")
    assert {row["model_version"] for row in rows} == {"2"}


def test_the_next_run_numbers_past_the_killed_one_and_removes_only_its_marked_folder(history):
    assert f"export: {history['export'] / '3'} (signature" in history["fourth"].stdout
    assert sorted(history["after_fourth"]) == sorted(["1", "2", "3", "README.txt", "notes", ".partial-mine"])
    assert snapshot(history["export"] / "1") == history["version_1"]
    assert snapshot(history["export"] / "2") == history["version_2"]


def test_what_the_project_did_not_make_in_the_export_folder_survives_every_run(history):
    assert {name: snapshot(history["export"] / name) for name in history["user"]} == history["user"]


# -- refused: one line, exit 2, and RESULTS/export byte-identical --------------------------------------

def assert_one_line(process, *needles):
    assert process.returncode == 2, f"exit {process.returncode}\n{process.stdout[-3000:]}\n{process.stderr[-6000:]}"
    assert "Traceback" not in process.stderr
    ours = [line for line in without_tf_log(process.stderr).splitlines() if line.strip()]
    assert len(ours) == 1 and ours[0].startswith("error: "), process.stderr[-6000:]
    for needle in needles:
        assert needle in ours[0], f"{needle!r} not in: {ours[0]}"


def an_export_file(export):
    export.write_text("the export of another tool\n")
    return f"{export} is not a folder, and the exported model's versions go into that folder"


def an_integer_named_file(export):
    export.mkdir()
    (export / "3").write_text("notes on version 3\n")
    return f"{export / '3'} is named like a model version but is not a folder, and TF Serving would try to load it"


def an_integer_named_folder_without_a_savedmodel(export):
    (export / "1").mkdir(parents=True)
    (export / "1" / "notes.txt").write_text("to be exported\n")
    return f"{export / '1'} is named like a model version but is a folder without saved_model.pb"


@pytest.mark.parametrize("make", [an_export_file, an_integer_named_file, an_integer_named_folder_without_a_savedmodel])
def test_an_export_path_that_cannot_take_a_version_is_one_line_and_left_byte_identical(tmp_path, make):
    results = tmp_path / "results"
    results.mkdir()
    message = make(results / "export")
    before = snapshot(results / "export")
    process = train(results, 2)
    assert_one_line(process, message, "move it")
    assert snapshot(results / "export") == before
    assert "export: " not in process.stdout
    # Refused before training: nothing else written (no checkpoint, no results.json).
    assert [path.name for path in results.iterdir()] == ["export"]


@pytest.mark.slow
def test_under_two_workers_every_worker_refuses_before_it_trains(tmp_path):
    """Every worker checks RESULTS/export before it trains, so each stops with the line that names it,
    and none waits for a peer that stopped."""
    results = tmp_path / "results"
    results.mkdir()
    message = an_export_file(results / "export")
    before = snapshot(results / "export")
    process = run_python("-m", "tf_recipes.operations.spawn", "--nproc", "2", "--", sys.executable, TRAIN,
                         "--launcher", "multiworker",
                         "--synthetic", "--max-steps", "2", "--results-dir", str(results))
    assert process.returncode == 2, process.stderr[-6000:]
    assert "Traceback" not in process.stderr
    errors = [line for line in process.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2, process.stderr[-6000:]  # one line from each worker
    assert all(message in line for line in errors), errors
    assert snapshot(results / "export") == before
    assert [path.name for path in results.iterdir()] == ["export"]
