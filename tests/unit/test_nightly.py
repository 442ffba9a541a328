"""`invoke nightly`: the matrix, the checks, the regression rule, the history, the report and --dry.

The negative controls, real nights that must turn red, run in tests/integration/test_nightly_controls.py;
the smoke tier itself, in the containers, in tests/integration/test_nightly_workflow.py (the
workflow's CPU job under act)."""

import dataclasses

import numpy as np
import pytest

from ci.nightly import matrix as nightly
from ci.nightly import report as nightly_report
from helpers import REPO, assert_ok, run_invoke

MATRIX = nightly.load_matrix(str(REPO / "ci" / "nightly" / "matrix.yaml"))


# -- the matrix ----------------------------------------------------------------------------------

def test_every_cell_of_a_recipe_trains_on_the_same_global_batch():
    """Every launcher cell of a recipe; a quality cell, compared with none of them, on its own entry's."""
    for tier in nightly.TIERS:
        for cell in nightly.expand(MATRIX, tier):
            argv = nightly.cell_command(cell, "/r", None)
            per_replica = int(argv[argv.index("--batch-size") + 1])
            spec = MATRIX.quality[cell.recipe] if cell.quality else MATRIX.recipes[cell.recipe]
            assert per_replica * cell.replicas == spec["global_batch"], cell.id
            assert argv[argv.index("--runtime") + 1] == cell.runtime and argv[argv.index("--base") + 1] == cell.base


def test_a_launchers_env_goes_into_its_cells_command(tmp_path):
    (tmp_path / "m.yaml").write_text(
        "launchers:\n  single: {replicas: 1, flags: [--launcher, single]}\n"
        "  slow: {replicas: 2, flags: [--launcher, mirrored], env: {TF_RECIPES_FAULT_SLOW_STEP: 0.1}}\n"
        "recipes:\n  mnist-cnn: {global_batch: 8, args: [--synthetic], reference: single, time_limit: 60}\n"
        "tiers:\n  cpu: {recipes: [mnist-cnn], launchers: [single, slow], runtimes: [local], bases: [cpu]}\n")
    cells = {c.launcher: c for c in nightly.expand(nightly.load_matrix(str(tmp_path / "m.yaml")), "cpu")}
    slow = nightly.cell_command(cells["slow"], "/r", None)
    assert slow[:3] == ["env", "TF_RECIPES_FAULT_SLOW_STEP=0.1", "invoke"] and "--" in slow
    assert nightly.cell_command(cells["single"], "/r", None)[:2] == ["invoke", "run"]


def test_gpu_cells_ask_for_one_gpu_per_replica_and_cpu_cells_for_cpu_replicas():
    gpu = {c.launcher: nightly.cell_command(c, "/r", None) for c in nightly.expand(MATRIX, "gpu")}
    assert gpu["single"][3:5] == ["--gpus", "1"] and gpu["horovodrun"][3:5] == ["--gpus", "2"]
    smoke = {c.launcher: nightly.cell_command(c, "/r", None) for c in nightly.expand(MATRIX, "smoke")}
    assert smoke["mpirun"][3:7] == ["--gpus", "0", "--cpu-replicas", "2"]
    assert smoke["mpirun"][smoke["mpirun"].index("--horovod-runner") + 1] == "mpirun"


def test_cells_are_compared_with_their_recipes_reference_unless_the_matrix_says_why_not():
    cells = {c.id: c for c in nightly.expand(MATRIX, "cpu")}
    assert cells["mnist-cnn/mpirun/docker/cpu"].reference_id == "mnist-cnn/single/docker/cpu"
    assert cells["cassava-resnet/horovodrun/docker/cpu"].reference_id == "cassava-resnet/mirrored/docker/cpu"
    assert not cells["cassava-resnet/single/docker/cpu"].parity and cells["cassava-resnet/horovodrun/docker/cpu"].parity


def test_cells_that_cannot_run_here_say_why():
    cells = {c.id: c for c in nightly.expand(MATRIX, "gpu") + nightly.expand(MATRIX, "cpu")}
    here = {"docker": True, "apptainer": False, "gpus": 0, "ngc": False}
    assert "GPU" in nightly.not_runnable(cells["mnist-cnn/single/docker/ngc"], here)
    assert "bash ci/apptainer.sh" in nightly.not_runnable(cells["mnist-cnn/single/apptainer/cpu"], here)
    assert nightly.not_runnable(cells["mnist-cnn/mpirun/docker/cpu"], here) is None
    assert "NGC" in nightly.not_runnable(cells["mnist-cnn/single/docker/ngc"], {**here, "gpus": 8})
    # With Apptainer, an apptainer cell runs; its SIF is made from the Docker image, so it needs the engine too.
    assert nightly.not_runnable(cells["mnist-cnn/mpirun/apptainer/cpu"], {**here, "apptainer": True}) is None
    assert "Docker image" in nightly.not_runnable(cells["mnist-cnn/mpirun/apptainer/cpu"],
                                                  {**here, "apptainer": True, "docker": False})


def test_only_keeps_the_reference_and_single_cells_a_cell_is_compared_with():
    cells = nightly.expand(MATRIX, "cpu")
    chosen = {c.id for c in nightly.select(cells, "cassava-resnet/horovodrun/docker/*")}
    assert chosen == {"cassava-resnet/horovodrun/docker/cpu", "cassava-resnet/mirrored/docker/cpu",
                      "cassava-resnet/single/docker/cpu"}
    # An Apptainer cell is also compared with the same cells under Docker, in the image its SIF is made from.
    chosen = {c.id for c in nightly.select(cells, "mnist-cnn/multiworker/apptainer/cpu")}
    assert chosen == {f"mnist-cnn/{launcher}/{runtime}/cpu" for launcher in ("multiworker", "single")
                      for runtime in ("apptainer", "docker")}


def test_an_apptainer_cell_builds_its_sif_and_a_failed_build_breaks_only_its_own_cells(tmp_path, monkeypatch):
    from ci.nightly import runner

    monkeypatch.setattr(runner, "cpu_base_choice", lambda images: "debian")  # no engine asked
    cells = nightly.select(nightly.expand(MATRIX, "cpu"), "mnist-cnn/single/*/cpu")
    facts = {"docker": True, "apptainer": True, "gpus": 0, "ngc": False, "memlock": True}
    steps = dict(runner.build_steps(cells, facts, {}))
    assert steps["CPU base of ngc-25.02 on debian"] == ["images.cpu", "--stack", "ngc-25.02", "--base", "debian"]
    assert steps["mnist-cnn:cpu (docker)"] == ["build", "mnist-cnn", "--stack", "ngc-25.02", "--base", "cpu",
                                               "--runtime", "docker"]
    assert steps["mnist-cnn:cpu (apptainer)"] == ["build", "mnist-cnn", "--stack", "ngc-25.02", "--base", "cpu",
                                                  "--runtime", "apptainer", "--sif-compression", "zstd"]
    failed = {"mnist-cnn:cpu (apptainer)": "building mnist-cnn:cpu (apptainer) failed"}
    entries = runner.run_cells(MATRIX, [c for c in cells if c.runtime == "apptainer"], facts, str(tmp_path),
                               failed, {}, {})
    assert entries["mnist-cnn/single/apptainer/cpu"]["problems"] == [failed["mnist-cnn:cpu (apptainer)"]]


@pytest.mark.parametrize("text, problem", [
    ("launchers: {}\nrecipes: {}\n", "missing `tiers`"),
    ("launchers: {single: {replicas: 1}}\nrecipes: {}\ntiers: {}\n", "launchers.single: missing `flags`"),
    ("launchers: {}\nrecipes: {}\ntiers: {nightly: {}}\n", "tiers.nightly: unknown tier"),
    ("launchers: [\n", "is not valid YAML"),
    ("launchers: {slow: {replicas: 1, flags: [], env: [TF_RECIPES_FAULT_SLOW_STEP]}}\nrecipes: {}\ntiers: {}\n",
     "launchers.slow.env: expected a mapping"),
    ("launchers: {slow: {replicas: 1, flags: [], env: {TF-SLOW: '1'}}}\nrecipes: {}\ntiers: {}\n",
     "'TF-SLOW' is not an environment variable name"),
    ("launchers: {slow: {replicas: 1, flags: [], env: {SLOW: [1]}}}\nrecipes: {}\ntiers: {}\n",
     "launchers.slow.env.SLOW: expected a string or a number"),
])
def test_a_broken_matrix_is_named_in_one_line(tmp_path, text, problem):
    (tmp_path / "m.yaml").write_text(text)
    with pytest.raises(nightly.MatrixError, match=problem.replace("`", ".")):
        nightly.load_matrix(str(tmp_path / "m.yaml"))
    process = run_invoke("nightly", "--matrix", str(tmp_path / "m.yaml"), "--dry", timeout=60)
    assert process.returncode == 2 and process.stderr.count("\n") == 1 and "Traceback" not in process.stderr


# -- checks, retries and the regression rule -----------------------------------------------------

def test_infrastructure_errors_are_told_from_wrong_results():
    assert nightly.infrastructure_error("docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock.")
    assert nightly.infrastructure_error("OSError: [Errno 98] Address already in use") == "a port in use"
    assert nightly.infrastructure_error("Error response from daemon: toomanyrequests: rate limit") is not None
    assert nightly.infrastructure_error("error: replicas out of sync: 2 different fingerprints") is None
    assert nightly.infrastructure_error("error setting rlimit type 8: operation not permitted") is None


def results_of(cell, losses, prints):
    return {**{k: 0 for k in nightly.RESULT_FIELDS}, "replicas": cell.replicas, "global_batch": cell.global_batch,
            "losses": [{"step": 10 * (i + 1), "loss": v} for i, v in enumerate(losses)], "replica_fingerprints": prints}


def test_the_cell_checks_catch_drift_a_flat_loss_and_missing_fields():
    cell = next(c for c in nightly.expand(MATRIX, "smoke") if c.launcher == "mirrored")
    assert nightly.check_results(cell, results_of(cell, [2.0, 1.0], ["a", "a"])) == []
    assert "out of sync" in nightly.check_results(cell, results_of(cell, [2.0, 1.0], ["a", "b"]))[0]
    assert "did not go down" in nightly.check_results(cell, results_of(cell, [2.0, 2.5], ["a", "a"]))[0]
    assert "lacks" in nightly.check_results(cell, {"recipe": "mnist-cnn"})[0]
    assert nightly.check_results(cell, None) == ["no results.json"]


def test_parity_holds_within_the_tolerance_and_fails_beyond_it():
    cell = next(c for c in nightly.expand(MATRIX, "smoke") if c.launcher == "mirrored")
    reference = results_of(cell, [2.0, 1.0], ["a", "a"])
    weights = {"dense/kernel": np.linspace(-0.1, 0.1, 50).reshape(5, 10)}
    assert nightly.check_parity(reference, weights, reference, weights) == []
    nudged = {"dense/kernel": weights["dense/kernel"] + 5e-4}
    assert nightly.check_parity(results_of(cell, [2.0 * (1 + 5e-4), 1.0], []), nudged, reference, weights) == []
    moved = {"dense/kernel": weights["dense/kernel"] + 5e-3}
    assert "final weights differ" in nightly.check_parity(reference, moved, reference, weights)[0]
    assert "loss curve differs" in \
        nightly.check_parity(results_of(cell, [2.0, 1.01], []), weights, reference, weights)[0]


def test_an_apptainer_cell_is_held_to_its_docker_twin(tmp_path):
    """add_parity: each passing Apptainer cell against the Docker cell of the same launcher and image."""
    import h5py

    from ci.nightly import runner

    cells = {c.id: c for c in nightly.select(nightly.expand(MATRIX, "cpu"), "mnist-cnn/single/*/cpu")}
    weights = np.linspace(-0.1, 0.1, 50)
    entries = {}
    for cell_id, shift in (("mnist-cnn/single/docker/cpu", 0.0), ("mnist-cnn/single/apptainer/cpu", 5e-3)):
        folder = tmp_path / cell_id.replace("/", "-")
        folder.mkdir()
        with h5py.File(folder / "final.weights.h5", "w") as handle:
            handle["dense/kernel"] = weights + shift
        entries[cell_id] = {"_cell": cells[cell_id], "problems": [], "_results_dir": str(folder),
                            "_results": results_of(cells[cell_id], [2.0, 1.0], ["a"])}
    runner.add_parity(entries)
    twin = entries["mnist-cnn/single/apptainer/cpu"]
    assert twin["parity_with_docker"] == "mnist-cnn/single/docker/cpu"
    assert len(twin["problems"]) == 1 and twin["problems"][0].startswith(
        "against its Docker cell mnist-cnn/single/docker/cpu: final weights differ"), twin["problems"]
    assert entries["mnist-cnn/single/docker/cpu"]["problems"] == []


def night(tier, ratios, status="pass"):
    return {"started": "x", "tier": tier, "cells": {c: {"status": status, "ratio": r} for c, r in ratios.items()}}


def test_a_regression_is_a_drop_of_more_than_a_quarter_against_the_median_of_recent_nights():
    rule = {"window": 7, "min_nights": 3, "drop": 0.25}
    history = [night("cpu", {"c": r}) for r in (0.9, 1.0, 1.1)]
    assert nightly.regressions({"c": 0.76}, history, "cpu", rule) == []
    found = nightly.regressions({"c": 0.74}, history, "cpu", rule)
    assert [r["cell"] for r in found] == ["c"] and found[0]["baseline"] == 1.0
    assert nightly.regressions({"c": 0.5}, history[:2], "cpu", rule) == []  # too few nights yet
    assert nightly.regressions({"c": 0.5}, history, "smoke", rule) == []  # other tiers do not count
    failed = [night("cpu", {"c": 2.0}, status="fail")] * 5
    assert nightly.regressions({"c": 0.74}, history + failed, "cpu", rule)  # failed nights are not a baseline


def test_dry_lists_every_cell_with_its_command_and_runs_nothing(tmp_path):
    process = run_invoke("nightly", "--tier", "gpu", "--dry", "--out", str(tmp_path), timeout=60)
    assert_ok(process)
    assert process.stdout.count("invoke run ") == len(nightly.expand(MATRIX, "gpu"))
    assert not any(tmp_path.iterdir())


def test_suite_runs_the_full_tier_into_its_out_and_dry_runs_nothing(tmp_path):
    process = run_invoke("nightly", "--suite", "--dry", "--out", str(tmp_path / "suite"), timeout=60)
    assert_ok(process)
    assert process.stdout.strip() == f"+ bash ci/test.sh --full --report {tmp_path / 'suite'}"
    assert not any(tmp_path.iterdir())


# -- the gpu tier runs where its GPUs are ---------------------------------------------------------

def test_a_gpu_tier_where_no_cell_can_run_names_why_in_one_line():
    cells = nightly.expand(MATRIX, "gpu")
    reason = nightly.nothing_runnable(cells, {"docker": True, "gpus": 0, "ngc": False}, "gpu")
    assert "\n" not in reason and reason.startswith(f"tier gpu ran nothing: none of its {len(cells)} cells")
    assert "no GPU (nvidia-smi lists none)" in reason and "no NGC base image" in reason
    assert "needs 1 GPU(s); this machine has 0" in reason
    # Eight GPUs, the NGC image and Apptainer: every cell can run, so nothing to say.
    assert nightly.nothing_runnable(cells, {"docker": True, "apptainer": True, "gpus": 8, "ngc": True}, "gpu") is None


def test_a_cell_that_cannot_run_here_fails_saying_why_in_every_tier(tmp_path):
    from ci.nightly import runner

    facts = {"docker": True, "apptainer": False, "gpus": 0, "ngc": False, "memlock": True}
    for tier in ("gpu", "cpu"):
        cells = [c for c in nightly.expand(MATRIX, tier) if c.runtime == "apptainer" or c.gpus][:2]
        entries = runner.run_cells(MATRIX, cells, facts, str(tmp_path), {}, {}, {})
        assert [e["status"] for e in entries.values()] == ["fail"] * len(cells), entries
        assert all("not run, though its tier is meant to run it" in e["problems"][0] for e in entries.values())
    apptainer = next(e for e in entries.values() if e["runtime"] == "apptainer")
    assert "Apptainer does not run here" in apptainer["problems"][0]


# -- the history: one record per night --------------------------------------------------------------

def test_a_rerun_of_the_same_night_replaces_its_history_record(tmp_path):
    from ci.nightly import runner

    first = {"started": "2026-11-22T02:17:00+00:00", "tier": "cpu", "night": "4711", "passed": False, "cells": {}}
    rerun = {**first, "started": "2026-11-22T05:00:00+00:00", "passed": True}
    runner.write_history(str(tmp_path), first)
    runner.write_history(str(tmp_path), rerun)
    assert [n["started"] for n in runner.read_history(str(tmp_path))] == [rerun["started"]]
    # Another night, or the other tier of the same run, is a record of its own.
    runner.write_history(str(tmp_path), {**first, "night": "4712"})
    runner.write_history(str(tmp_path), {**first, "tier": "gpu"})
    assert len(runner.read_history(str(tmp_path))) == 3
    # Without a night id (a night run by hand), records are told apart by their start time.
    runner.write_history(str(tmp_path), {k: v for k, v in first.items() if k != "night"})
    assert len(list(tmp_path.glob("*.json"))) == 4


# -- report.json's consumers, on the report the cpu night really wrote ------------------------------

def test_a_report_invoke_nightly_really_wrote_makes_a_history_record_and_its_plot(tmp_path):
    """docs/nightly/cpu/report.json, as `invoke nightly --tier cpu` wrote it: its history record holds every
    cell, and the history plot is a PNG."""
    import json

    report = json.loads((REPO / "docs" / "nightly" / "cpu" / "report.json").read_text())
    record = nightly_report.history_record(report)
    assert set(record["cells"]) == {e["id"] for e in report["entries"] if e["kind"] == "cell"}
    nightly_report.plot_history([record], report["tier"], str(tmp_path / "history.png"))
    assert (tmp_path / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- quality cells: each recipe's metric on held-out data against its floor ------------------------------

# results.json as each recipe's train.py wrote it, 2 steps into a temporary folder (the command is in
# each file's "command"): mnist-cnn on the real digits, the others on the matrix's generated data.
RESULTS = REPO / "tests" / "unit" / "nightly_results"
QUALITY = {"mnist-cnn": "final_metrics.test.accuracy", "cassava-resnet": "final_metrics.validation.accuracy",
           "cityscapes-unet": "final_metrics.val.mean_iou"}
METRICS = QUALITY  # the check on every recipe's results.json


def real_results(recipe: str) -> dict:
    import json

    return json.loads((RESULTS / f"{recipe}.json").read_text())


def test_the_cpu_tier_plans_one_quality_cell_per_recipe_with_its_command():
    cells, readme = nightly.plan_night(MATRIX, "cpu", "quality")
    assert readme == [] and {c.id for c in cells} == {f"{recipe}/quality/docker/cpu" for recipe in QUALITY}
    for cell in cells:
        entry = MATRIX.quality[cell.recipe]
        assert cell.quality == (QUALITY[cell.recipe], entry["floor"]) and not cell.parity
        command = nightly.cell_command(cell, "/r", "/data")
        assert command[:7] == ["invoke", "run", cell.recipe, "--gpus", "0", "--cpu-replicas", "1"]
        assert command[command.index("--launcher") + 1] == "single" and "--synthetic" not in command
        assert command[command.index("--runtime"):command.index("--runtime") + 6] == \
            ["--runtime", "docker", "--stack", "ngc-25.02", "--base", "cpu"]
        assert command[command.index("--") + 1:] == [*entry["args"], "--batch-size", str(entry["global_batch"])]
    # mnist-cnn's quality cell trains the defaults on the real digits, copied in; cassava-resnet's on more
    # generated photos than its launcher cells; cityscapes-unet's on its recipe's data.
    assert MATRIX.data_spec(cells[0].data_key)["copy"]["env"] == "TF_RECIPES_MNIST_DIR"
    assert sorted(c.data_key for c in cells) == ["cassava-resnet/quality", "cityscapes-unet", "mnist-cnn/quality"]
    assert not [c for tier in ("smoke", "gpu") for c in nightly.expand(MATRIX, tier) if c.quality]


@pytest.mark.parametrize("recipe", sorted(METRICS))
def test_the_quality_check_is_red_below_the_floor_green_at_it_and_red_without_the_metric(recipe):
    results = real_results(recipe)
    value = nightly.metric_value(results, METRICS[recipe])
    assert isinstance(value, float)
    assert nightly.check_quality(results, METRICS[recipe], value) == (value, [])
    assert nightly.check_quality(results, METRICS[recipe], value - 0.01) == (value, [])
    found, problems = nightly.check_quality(results, METRICS[recipe], value + 0.001)
    assert found == value
    assert problems == [f"quality: {METRICS[recipe]} {value:.4f} is below its floor {value + 0.001:g}"]
    split = METRICS[recipe].split(".")[1]
    for broken in ({k: v for k, v in results.items() if k != "final_metrics"},
                   {**results, "final_metrics": {split: {k: v for k, v in results["final_metrics"][split].items()
                                                         if k not in ("accuracy", "mean_iou")}}},
                   {**results, "final_metrics": {split: {**results["final_metrics"][split],
                                                         METRICS[recipe].split(".")[-1]: None}}}):
        found, problems = nightly.check_quality(broken, METRICS[recipe], 0.0)
        assert found is None and len(problems) == 1 and problems[0].startswith(f"quality: {METRICS[recipe]} is ")
    assert nightly.check_quality(None, METRICS[recipe], 0.0)[0] is None


def fake_run(results: dict):
    """runner.run_logged in place: writes `results` as the cell's results.json and exits 0."""
    import json

    from ci.nightly import runner

    def run(argv, log_path, time_limit, env=None, shell=False):
        results_dir = argv[argv.index("--results-dir") + 1]
        import os

        os.makedirs(results_dir, exist_ok=True)
        with open(os.path.join(results_dir, "results.json"), "w") as handle:
            json.dump(results, handle)
        return runner.Finished(0, "", [])
    return run


@pytest.mark.parametrize("recipe", sorted(QUALITY))
def test_a_quality_cell_reports_its_metric_and_floor_and_fails_below_it(tmp_path, monkeypatch, recipe):
    """run_cell on a results.json in the recipe's real shape: the entry names the metric, its value and the
    floor; it fails below the floor and when the metric is missing."""
    from ci.nightly import runner

    cell = next(c for c in nightly.expand(MATRIX, "cpu") if c.quality and c.recipe == recipe)
    results = real_results(recipe)
    value = nightly.metric_value(results, QUALITY[recipe])
    for floor, lacking, wanted in ((value, False, []), (value + 0.001, False, ["is below its floor"]),
                                   (0.0, True, ["is missing in results.json"])):
        shown = {k: v for k, v in results.items() if k != "final_metrics"} if lacking else results
        monkeypatch.setattr(runner, "run_logged", fake_run(shown))
        entry = runner.run_cell(dataclasses.replace(cell, quality=(QUALITY[recipe], floor)), str(tmp_path), None, {})
        quality = [p for p in entry["problems"] if p.startswith("quality:")]
        assert entry["kind"] == "quality" and entry["metric"] == QUALITY[recipe] and entry["floor"] == floor
        assert entry["value"] == (None if lacking else value)
        assert len(quality) == len(wanted) and all(w in p for w, p in zip(wanted, quality, strict=True)), quality


def test_the_real_digits_missing_make_the_mnist_quality_cell_red_saying_where_to_put_them(tmp_path, monkeypatch):
    from ci.nightly import runner

    monkeypatch.setenv("TF_RECIPES_MNIST_DIR", str(tmp_path / "empty"))
    data, problem = runner.prepare_data(MATRIX, "mnist-cnn/quality", str(tmp_path / "work"), str(tmp_path))
    assert data is None and "\n" not in problem
    assert f"mnist.npz not found in {tmp_path / 'empty'}" in problem and "$TF_RECIPES_MNIST_DIR" in problem
    cell = next(c for c in nightly.expand(MATRIX, "cpu") if c.quality and c.recipe == "mnist-cnn")
    facts = {"docker": True, "apptainer": False, "gpus": 0, "ngc": False, "memlock": True}
    entries = runner.run_cells(MATRIX, [cell], facts, str(tmp_path), {}, {}, {cell.data_key: problem})
    assert entries[cell.id]["status"] == "fail" and entries[cell.id]["problems"] == [problem]
    # Named by the variable, the folder's mnist.npz is copied into the night's data folder.
    (tmp_path / "digits").mkdir()
    (tmp_path / "digits" / "mnist.npz").write_bytes(b"npz")
    monkeypatch.setenv("TF_RECIPES_MNIST_DIR", str(tmp_path / "digits"))
    data, problem = runner.prepare_data(MATRIX, "mnist-cnn/quality", str(tmp_path / "work"), str(tmp_path))
    assert problem is None and (tmp_path / "work" / "data" / "mnist.npz").read_bytes() == b"npz"
    assert data == str(tmp_path / "work" / "data")
    # Without the variable: ../shared/data/mnist beside the repository.
    monkeypatch.delenv("TF_RECIPES_MNIST_DIR")
    assert runner.copy_data({**MATRIX.quality["mnist-cnn"]["copy"], "default": "no/such/folder"}, str(tmp_path)) \
        .startswith(f"mnist.npz not found in {REPO / 'no' / 'such' / 'folder'}")


def test_the_report_shows_each_quality_cells_metric_and_floor():
    quality = {"kind": "quality", "recipe": "mnist-cnn", "launcher": "single", "runtime": "docker", "base": "cpu",
               "image": "cpu", "command": ["invoke", "run"], "attempts": 1, "duration_s": 1.0,
               "metric": "final_metrics.test.accuracy", "floor": 0.992}
    report = {"tier": "cpu", "passed": False, "started": "2026-11-27T12:00:00+00:00", "duration_s": 60.0,
              "command": "invoke nightly --tier cpu", "regressions": [], "regression_rule": MATRIX.regression,
              "entries": [{**quality, "id": "mnist-cnn/quality/docker/cpu", "value": 0.9931, "status": "pass",
                           "reason": ""},
                          {**quality, "id": "cassava-resnet/quality/docker/cpu", "value": None, "status": "fail",
                           "metric": "final_metrics.validation.accuracy", "floor": 0.75,
                           "reason": "quality: final_metrics.validation.accuracy is missing in results.json"}]}
    summary = nightly_report.render_summary(report)
    assert "| mnist-cnn/quality/docker/cpu | `final_metrics.test.accuracy` | 0.9931 | 0.992 | ✅ pass |" in summary
    assert "| cassava-resnet/quality/docker/cpu | `final_metrics.validation.accuracy` | missing | 0.75 |" in summary
    junit = nightly_report.render_junit(report)
    assert "final_metrics.test.accuracy 0.9931, floor 0.992" in junit and 'classname="nightly.cpu.mnist-cnn"' in junit
    assert nightly_report.history_record(report)["cells"] == {}  # speed history is the launcher cells'
