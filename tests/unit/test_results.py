"""The recipes' Results sections (ci/results.py, `invoke results`): the runs it starts and keeps, what it
refuses to keep, the flags it shows, and a results.json or README that cannot make the section is one line."""
import json
import shutil

import pytest

from ci import results
from helpers import run_invoke


def test_the_replicated_run_is_the_documented_run_on_more_replicas(tmp_path, monkeypatch):
    one = results.run_args("mnist-cnn", "data", "out")
    two = results.run_args("mnist-cnn", "data", "out", "horovod")
    assert two == [*one[:one.index("--data-dir")], "--launcher", "horovod", "--cpu-replicas", "2",
                   *one[one.index("--data-dir"):], "--", "--batch-size", "64"]
    # A one-device run kept as a launcher's is refused; were it not, it would be written under tmp_path.
    source = tmp_path / "single"
    source.mkdir()
    shutil.copyfile(results.kept_dir("mnist-cnn") + "/results.json", source / "results.json")
    monkeypatch.setattr(results, "ROOT", str(tmp_path / "repository"))
    with pytest.raises(results.ResultsError, match="is a run of single on 1 replica"):
        results.keep("mnist-cnn", str(source), "mirrored")
    assert not (tmp_path / "repository").exists()


def test_a_results_json_without_the_metric_or_curve_is_one_line(tmp_path):
    source = results.kept_dir("mnist-cnn") + "/results.json"
    shutil.copyfile(source, tmp_path / "results.json")
    data = json.loads((tmp_path / "results.json").read_text())
    del data["final_metrics"]["test"]["majority_accuracy"]
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(results.ResultsError, match="missing \\['majority_accuracy'\\]\\); run the recipe again"):
        results.load("mnist-cnn", str(tmp_path))
    process = run_invoke("results", "mnist-cnn", "--from", str(tmp_path))
    assert process.returncode != 0 and "Traceback" not in process.stderr
    assert "majority_accuracy" in process.stderr


def test_a_readme_without_its_markers_is_refused():
    with pytest.raises(results.ResultsError, match="must hold one line"):
        results.splice("# recipe\n", "section\n", "README.md")


def test_flags_leave_the_folders_out():
    assert results.flags_of(["train.py", "--data-dir", "/d", "--results-dir", "/r"]) == "(defaults)"
    assert results.flags_of(["train.py", "--data-dir", "/d", "--preset", "cpu"]) == "--preset cpu"
    assert results.flags_of(["train.py", "--launcher", "mirrored", "--batch-size", "64", "--cpu-replicas", "2"]) \
        == "--batch-size 64"


def test_invoke_results_dry_prints_the_documented_run(tmp_path):
    process = run_invoke("results", "cityscapes-unet", "--data-dir", str(tmp_path), "--dry")
    assert process.returncode == 0, process.stderr
    assert "invoke run cityscapes-unet --gpus 0 --runtime local --data-dir" in process.stdout
    assert "-- --preset cpu" in process.stdout and "would keep" in process.stdout
    missing = run_invoke("results", "mnist-cnn")
    assert missing.returncode != 0 and "give --data-dir" in missing.stderr and "Traceback" not in missing.stderr


def test_invoke_results_launcher_dry_prints_the_run_on_2_replicas(tmp_path):
    process = run_invoke("results", "mnist-cnn", "--data-dir", str(tmp_path), "--launcher", "horovod", "--dry")
    assert process.returncode == 0, process.stderr
    run = "invoke run mnist-cnn --gpus 0 --runtime local --launcher horovod --cpu-replicas 2 --data-dir"
    assert run in process.stdout
    assert process.stdout.rstrip().endswith("Results section") and "-- --batch-size 64" in process.stdout
    assert "in docs/results/mnist-cnn/horovod" in process.stdout
    refused = run_invoke("results", "cityscapes-unet", "--data-dir", str(tmp_path), "--launcher", "horovod", "--dry")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "--launcher horovod: cityscapes-unet's Results have runs under one device only" in refused.stderr

