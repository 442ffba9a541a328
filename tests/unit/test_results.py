"""The recipes' Results sections (ci/results.py, `invoke results`): the runs it starts and keeps, what it
refuses to keep, the flags it shows, and a results.json or README that cannot make the section is one line."""
import json
import shutil

import pytest

from bench_reports import png_size
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



def side_by_side(classes, categories, seeds=(0, 1)):
    """A results.json of cityscapes-unet and a report of ci/bench/segmentation.py around it, as they write
    them (the summary made by the benchmark's own summarize); the 2020 page the better baseline."""
    from ci.bench import segmentation

    def figures(base, seed, groups):
        return [round(base + index / 100 + seed / 1000, 4) for index in range(len(groups))] if groups else None

    def page(version, seed):
        base = 0.3 if version == "current" else 0.35
        return {"version": version, "optimizer": version, "mean_iou": base + seed / 100, "steps": 700,
                "wall_seconds": 500.0, "trained_seconds": 495.0, "budget_seconds": 490.0, "batch_size": 8,
                "category_mean_iou": base + 0.3 if categories else None,
                "iou_per_class": figures(base, seed, classes), "iou_per_category": figures(base, seed, categories)}

    runs = [{"seed": seed,
             "recipe": {"mean_iou": 0.45 + seed / 100, "category_mean_iou": 0.7 if categories else None,
                        "iou_per_class": figures(0.45, seed, classes),
                        "iou_per_category": figures(0.7, seed, categories),
                        "steps": 600, "wall_seconds": 490.0, "load_average": {"start": [1.5, 1, 1], "end": [2, 2, 2]},
                        "time_to_iou": {"step": 75, "seconds": 80.0}},
             "baselines": {version: page(version, seed) for version in segmentation.VERSIONS}} for seed in seeds]
    report = {"kind": results.SIDE_BY_SIDE, "version": 2, "seeds": list(seeds), "runs": runs,
              "classes": classes, "categories": categories, "target_iou": 0.2, "baseline_size": [128, 256],
              "baseline_budget": "recipe", "git": {"commit": "c" * 40, "dirty": False},
              "data": {"sha256": "d" * 64, "train_examples": 80, "val_examples": 20},
              "command": ["python", "-m", "ci.bench.segmentation", "--data-dir", "DIR", "--json", "REPORT"],
              "target_run": {"reached": True, "flags": "--preset cpu --seed 0 --target mean_iou=0.2", "steps": 75,
                             "target_step": 75, "time_to_target": 80.0, "wall_seconds": 84.0, "mean_iou": 0.21},
              "summary": segmentation.summarize(runs)}
    last = runs[-1]["recipe"]
    kept = {"recipe": "cityscapes-unet", "launcher": "single", "replicas": 1, "steps": 600, "wall_seconds": 490.0,
            "command": ["train.py", "--preset", "cpu", "--seed", str(seeds[-1])], "classes": classes,
            "categories": categories, "curve": [{"step": 600, "seconds": 480.0, "mean_iou": last["mean_iou"]}],
            "final_metrics": {"val": {"mean_iou": last["mean_iou"], "constant_mean_iou": 0.05,
                                      "iou_per_class": last["iou_per_class"],
                                      "category_mean_iou": last["category_mean_iou"],
                                      "iou_per_category": last["iou_per_category"]}}}
    return kept, report


def test_the_side_by_side_report_makes_a_table_per_class_and_per_category_over_the_seeds(tmp_path):
    classes, categories = ["road", "sidewalk", "car"], ["flat", "vehicle"]
    kept, report = side_by_side(classes, categories)
    section = results.render("cityscapes-unet", kept, report)
    summary = report["summary"]
    assert summary["better_baseline"] == "2020"
    # every class and category has its row: the recipe's mean ± sd over the seeds beside the better page's
    for kind, names, key in (("class", classes, "iou_per_class"), ("category", categories, "iou_per_category")):
        assert (f"| IoU per {kind}, mean ± sd of 2 seeds | cityscapes-unet `--preset cpu` | "
                "keras.io U-Net, 2020 page |") in section
        for index, name in enumerate(names):
            recipe, page = summary[key]["recipe"][index], summary[key]["baseline"][index]
            assert (f"| {name} | {recipe['mean']:.3f} ± {recipe['std']:.3f} | {page['mean']:.3f} ± {page['std']:.3f} |"
                    in section)
    mean = summary["recipe"]["class_mean_iou"]
    assert (f"| **class mean IoU** | **{mean['mean']:.3f} ± {mean['std']:.3f}** ({mean['min']:.3f}–{mean['max']:.3f})"
            in section)
    for version in ("current", "2020"):
        assert f"`ci/bench/cityscapes_baseline.py --version {version}`) | — | 1 | 700 |" in section
    assert f"is {summary['class_ratio']:.2f} times its" in section and "the 2020 page" in section
    assert "`--preset cpu --seed 0 --target mean_iou=0.2`" in section
    assert "IoU per category: " not in section  # the report's tables replace the run's own lines
    results.plot("cityscapes-unet", kept, str(tmp_path / "curve.png"), (), report)  # both pages marked on it
    assert png_size(tmp_path / "curve.png")[0] > 0


def test_pairs_data_has_no_category_table_and_an_older_report_is_refused():
    kept, report = side_by_side(["sky", "grass"], None, seeds=(4,))
    section = results.render("cityscapes-unet", kept, report)
    assert "| IoU per class, seed 4 |" in section and "| IoU per category" not in section
    assert "no less category mean IoU" not in section
    report["runs"][-1]["recipe"]["steps"] = 599
    with pytest.raises(results.ResultsError, match="is not the run kept in docs/results"):
        results.render("cityscapes-unet", kept, report)
    with pytest.raises(results.ResultsError, match="older ci/bench/segmentation.py"):
        results.render("cityscapes-unet", kept, {"kind": results.SIDE_BY_SIDE, "rounds": []})


def test_a_run_without_a_report_lists_the_classes_and_categories_it_learnt():
    kept, _ = side_by_side(["road", "car", "train"], ["flat", "vehicle"], seeds=(0,))
    metrics = kept["final_metrics"]["val"]
    metrics["iou_per_class"] = [0.9, 0.0, None]
    lines = "\n".join(results.per_category_lines(kept, metrics))
    assert "IoU per class: road 0.900; 0 for car; none for train, neither in the val scenes nor predicted." in lines
    assert "IoU per category: flat 0.700, vehicle 0.710." in lines
