"""invoke bench: the pure parts of ci/bench (plan, report), the task's --dry and its failures. The task run
for real on mnist-cnn: tests/integration/test_bench_run.py."""
import json
import math
import sys

import pytest

from bench_reports import png_size
from ci.bench import plan, runner
from ci.bench import report as bench_report
from commands import launch
from tasks import host
from helpers import REPO, assert_ok, run_invoke

PNG_SIZE = tuple(round(inches * bench_report.FIGURE_DPI) for inches in bench_report.FIGURE_SIZE_INCHES)


# -- options ---------------------------------------------------------------------------------------

def test_replica_counts_are_parsed_in_order():
    assert plan.parse_replicas("1,2,4") == [1, 2, 4]
    assert plan.parse_replicas(" 8, 1 ") == [8, 1]


@pytest.mark.parametrize("text,message", [("1,0", "at least 1"), ("1,two", "'two' is not a whole number"),
                                          ("2,2", "lists 2 twice"), ("-1", "must not be negative")])
def test_bad_replica_counts_are_named(text, message):
    with pytest.raises(launch.LaunchError, match=message):
        plan.parse_replicas(text)


def test_launchers_are_checked():
    assert plan.parse_launchers("horovod,single,horovod") == ["horovod", "single"]
    with pytest.raises(launch.LaunchError, match="unknown launcher 'ddp'; choose one of: single, mirrored"):
        plan.parse_launchers("single,ddp")


def test_default_replica_counts():
    assert plan.default_replicas(0) == [1, 2, 4]
    assert plan.default_replicas(8) == [1, 2, 4, 8]
    assert plan.default_replicas(2) == [1, 2]
    assert plan.default_replicas(6) == [1, 2, 4, 6]


def test_train_arguments_default_per_recipe_and_are_replaced_when_given():
    assert plan.train_args_for("mnist-cnn", []) == ["--synthetic", "--max-steps", "60", "--log-every", "60"]
    assert plan.train_args_for("mnist-cnn", ["--max-steps", "8"]) == ["--max-steps", "8"]
    assert set(plan.DEFAULT_TRAIN_ARGS) == set(host.recipes())


# -- the run list ----------------------------------------------------------------------------------

def test_runs_are_interleaved_round_by_round_and_single_runs_one_replica():
    runs = plan.plan_runs("mnist-cnn", list(launch.LAUNCHERS), [1, 2], 2, ["--synthetic"], "/r")
    configurations = [(run.launcher, run.replicas) for run in runs]
    one_round = [("single", 1), ("mirrored", 1), ("multiworker", 1), ("horovod", 1),
                 ("mirrored", 2), ("multiworker", 2), ("horovod", 2)]
    assert configurations == one_round * 2
    assert [run.round for run in runs] == [1] * 7 + [2] * 7
    assert len({run.results_dir for run in runs}) == len(runs)
    for run in runs:  # each run writes its own results.json, where run_measurement reads it
        assert run.argv[run.argv.index("--results-dir") + 1] == run.results_dir
        assert run.env["CUDA_VISIBLE_DEVICES"] == ""
    mirrored, multiworker, horovod = runs[4:7]
    assert mirrored.argv[-2:] == ["--cpu-replicas", "2"]
    assert multiworker.argv[2:5] == ["tf_recipes.operations.spawn", "--nproc", "2"]
    assert horovod.argv[:3] == ["horovodrun", "-np", "2"] and "--gloo" in horovod.argv


def test_runs_on_gpus_use_one_gpu_per_replica():
    runs = plan.plan_runs("mnist-cnn", ["mirrored", "horovod"], [1, 4], 1, [], "/r", gpus=4)
    horovod = runs[-1]
    assert horovod.argv[:3] == ["horovodrun", "-np", "4"] and "--gloo" not in horovod.argv
    assert all("--cpu-replicas" not in run.argv for run in runs)
    assert horovod.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and runs[0].env["CUDA_VISIBLE_DEVICES"] == "0"
    with pytest.raises(launch.LaunchError, match="--replicas 8 is more than --gpus 4"):
        plan.plan_runs("mnist-cnn", ["mirrored"], [1, 8], 1, [], "/r", gpus=4)


def test_nothing_to_measure_is_refused():
    with pytest.raises(launch.LaunchError, match="single runs only 1 replica"):
        plan.plan_runs("mnist-cnn", ["single"], [2, 4], 1, [], "/r")
    with pytest.raises(launch.LaunchError, match="--rounds 0"):
        plan.plan_runs("mnist-cnn", ["single"], [1], 0, [], "/r")


def test_input_benchmark_command_only_where_the_recipe_has_one():
    command = runner.input_command_here("cassava-resnet", str(REPO), "/o/input.json", ["--photos", "64"], "python")
    assert command == ["python", "recipes/cassava-resnet/benchmark_input.py", "--photos", "64",
                       "--json", "/o/input.json"]
    assert runner.input_command_here("cityscapes-unet", str(REPO), "/o/i.json", [], "python")[-2:] == \
        ["--json", "/o/i.json"]
    assert runner.input_command_here("mnist-cnn", str(REPO), "/o/i.json", [], "python") is None


# -- summary ---------------------------------------------------------------------------------------

def record(launcher, replicas, rate, round_number=1, **extra):
    return {"round": round_number, "launcher": launcher, "replicas": replicas, "images_per_sec": rate,
            "global_batch": 128 * replicas, "replicas_in_sync": True, **extra}


def test_medians_speedup_and_efficiency():
    records = [record("single", 1, rate) for rate in (100.0, 300.0, 120.0)]
    records += [record("horovod", 1, rate) for rate in (90.0, 110.0)]
    records += [record("horovod", 2, rate) for rate in (150.0, 170.0, 400.0)]
    records += [record("mirrored", 2, 180.0)]  # no 1-replica mirrored: compared with single
    rows = {(row["launcher"], row["replicas"]): row for row in bench_report.summarize(records)}
    assert rows[("single", 1)]["images_per_sec_median"] == 120.0
    assert rows[("single", 1)]["efficiency"] == 1.0
    assert rows[("horovod", 1)]["images_per_sec_median"] == 100.0  # median of an even count: the mean of the middle two
    horovod = rows[("horovod", 2)]
    assert horovod["images_per_sec_rounds"] == [150.0, 170.0, 400.0]
    assert horovod["speedup"] == pytest.approx(1.7) and horovod["efficiency"] == pytest.approx(0.85)
    assert horovod["vs_single"] == pytest.approx(170.0 / 120.0)
    assert rows[("mirrored", 2)]["efficiency"] == pytest.approx(180.0 / (2 * 120.0))
    assert [row["launcher"] for row in bench_report.summarize(records)] == ["single", "mirrored", "horovod", "horovod"]


def test_failed_rounds_are_left_out_of_the_median_and_counted():
    records = [record("mirrored", 1, 100.0), record("mirrored", 2, 150.0),
               record("mirrored", 2, None, 2, error="exit status 1"),
               record("multiworker", 2, None, error="exit status 4")]
    rows = {(row["launcher"], row["replicas"]): row for row in bench_report.summarize(records)}
    assert rows[("mirrored", 2)]["images_per_sec_median"] == 150.0 and rows[("mirrored", 2)]["failed_rounds"] == 1
    assert rows[("multiworker", 2)]["images_per_sec_median"] is None
    assert rows[("multiworker", 2)]["efficiency"] is None and rows[("multiworker", 2)]["failed_rounds"] == 1


CASSAVA_LIKE = {"benchmark": "cassava", "rounds": 3, "pipelines": {
    "seed": {"images_per_sec": 779.7, "cpu_ms_per_image": 2.2},
    "ours_epoch": {"images_per_sec": 9322.9},
    "ratio_ours_epoch_to_seed": 12.29,
    "rounds": {"seed": [{"images_per_sec": 386.8}]}},
    "training_step": {"images_per_sec": 11.5, "batch": 32}}
CITYSCAPES_LIKE = {"date": "2026-11-21", "machine": {"cpus": 2}, "variants": {
    "raw_decode": {"images_per_sec": 24.2, "rounds": [{"images_per_sec": 23.9}]},
    "ours_1_pipeline": {"images_per_sec": 21.98},
    "broken": {"images_per_sec": None}, "flag": {"images_per_sec": True}, "nan": {"images_per_sec": math.nan},
    "nested": {"deeper": {"images_per_sec": 5}}}}


def test_input_rates_are_found_wherever_the_report_keeps_them():
    assert bench_report.input_rates(CASSAVA_LIKE) == {"pipelines.seed": 779.7, "pipelines.ours_epoch": 9322.9,
                                               "training_step": 11.5}
    assert bench_report.input_rates(CITYSCAPES_LIKE) == {"variants.raw_decode": 24.2, "variants.ours_1_pipeline": 21.98,
                                                  "variants.nested.deeper": 5.0}
    assert bench_report.input_rates({"unexpected": [1, 2]}) == {} and bench_report.input_rates([]) == {}


def test_input_section_says_why_there_is_nothing_to_compare(tmp_path):
    command = ["python", "recipes/cassava-resnet/benchmark_input.py", "--json", str(tmp_path / "i.json")]
    missing = bench_report.input_section("cassava-resnet", command, str(tmp_path / "i.json"), error="No such file")
    assert "no readable report (No such file)" in missing["note"] and "rates" not in missing
    section = bench_report.input_section("cassava-resnet", command, "i.json", report=CASSAVA_LIKE)
    assert section["rates"]["pipelines.seed"] == 779.7
    assert "holds no images/s" in bench_report.input_section("cassava-resnet", command, "i.json", report={})["note"]
    assert "failed with status 1" in bench_report.input_section("cassava-resnet", command, "i.json", status=1)["note"]
    assert "in memory" in bench_report.input_section("mnist-cnn", None, None)["note"]


@pytest.mark.parametrize("kept", sorted(str(p.relative_to(REPO))
                                        for p in (REPO / "docs" / "bench").glob("*-*/input-*.json")))
def test_input_rates_are_read_from_what_the_input_benchmarks_really_wrote(kept):
    """The kept reports of recipes/*/benchmark_input.py, as they wrote them."""
    rates = bench_report.input_rates(json.loads((REPO / kept).read_text()))
    assert rates and all(value > 0 for value in rates.values()), kept


def test_the_runner_reads_the_input_report_the_benchmark_wrote(tmp_path):
    command = [sys.executable, "-c",
               f"import json; json.dump({CASSAVA_LIKE!r}, open({str(tmp_path / 'i.json')!r}, 'w'))"]
    section = runner.run_input_benchmark("cassava-resnet", command, str(tmp_path / "i.json"), str(tmp_path), str(REPO))
    assert section["rates"]["pipelines.seed"] == 779.7
    broken = [sys.executable, "-c", f"open({str(tmp_path / 'j.json')!r}, 'w').write('{{not json')"]
    section = runner.run_input_benchmark("cassava-resnet", broken, str(tmp_path / "j.json"), str(tmp_path), str(REPO))
    assert "no readable report" in section["note"]
    failing = [sys.executable, "-c", "raise SystemExit(3)"]
    assert "status 3" in runner.run_input_benchmark("cassava-resnet", failing, "x", str(tmp_path), str(REPO))["note"]


def report_for(records, input_section=None, gpus=0):
    return bench_report.build_report("mnist-cnn", records, command="invoke bench mnist-cnn",
                                     date="2026-11-22 01:10 UTC",
                                     machine={"cpus": 2, "processor": "Test CPU",
                                              "load_average": {"before": [1.0, 1.0, 1.0], "after": [2.0, 1.5, 1.1]}},
                                     gpus=gpus, rounds=2, train_args=["--synthetic", "--max-steps", "60"],
                                     input_section=input_section or bench_report.input_section("mnist-cnn", None, None))


RECORDS = [record("single", 1, 1341.0, versions={"tensorflow": "2.17.1"}, load_average_1min=0.4),
           record("single", 1, 1300.0, 2, load_average_1min=3.1),
           record("horovod", 1, 1200.0), record("horovod", 2, 1580.0), record("horovod", 2, None, 2, error="exit 1")]


def test_markdown_table_names_every_configuration_and_says_what_cpu_efficiency_means():
    text = bench_report.render_markdown(report_for(RECORDS))
    assert "`invoke bench mnist-cnn`" in text and "2026-11-22 01:10 UTC" in text and "tensorflow 2.17.1" in text
    assert "| single | 1 | 128 | 1,320 | 1,341 / 1,300 | 1.00x | 1.00 |" in text
    assert "| horovod | 2 | 256 | 1,580 | 1,580 (1 failed) | 1.32x | 0.66 |" in text
    assert "shares the same 2 cores" in text and "not a speed-up" in text
    assert "in memory" in text and "[2.0, 1.5, 1.1]" in text
    assert "as each run ended: 0.4 to 3.1 (median 1.8) on 2 CPUs" in text
    assert "not a speed-up" not in bench_report.render_markdown(report_for(RECORDS, gpus=8))


def test_markdown_compares_input_rates_with_the_training_rate():
    section = {"command": "python recipes/cassava-resnet/benchmark_input.py --json x", "rates": {"seed": 660.0}}
    text = bench_report.render_markdown(report_for(RECORDS, section))
    assert "| seed | 660 | 0.50x |" in text and "(single, 1 replica: 1,320 img/s)" in text
    slow = report_for([record("single", 1, 0.456)], {"command": "c", "rates": {"seed": 39.9, "ours": 5359.8}})
    text = bench_report.render_markdown(slow)
    assert "| single | 1 | 128 | 0.46 | 0.46 |" in text and "| seed | 39.9 | 87.50x |" in text
    assert "| ours | 5,360 | 11,753.95x |" in text


def test_bar_labels_drop_the_path_every_input_figure_shares():
    assert bench_report._shared_prefix(["pipelines.summary.seed.first", "pipelines.summary.ours.first"]) == \
        "pipelines.summary."
    assert bench_report._shared_prefix(["variants.raw", "two_workers.early"]) == ""
    assert bench_report._shared_prefix(["a.b.c"]) == ""


def test_plot_writes_a_png_of_the_fixed_size(tmp_path):
    for name, section in (("mnist", None), ("cassava", {"command": "c", "rates": {"seed": 660.0, "ours": 9000.0}})):
        path = tmp_path / f"{name}.png"
        bench_report.plot(report_for(RECORDS, section), str(path))
        assert png_size(path) == PNG_SIZE


# -- the task --------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--replicas", "1,0"], "every count must be at least 1"),
    (["--launchers", "ddp"], "unknown launcher 'ddp'"),
    (["--gpus", "2", "--replicas", "1,4"], "--replicas 4 is more than --gpus 2"),
    (["--rounds", "x"], "--rounds 'x' is not a whole number"),
])
def test_bad_options_get_one_line_naming_the_value(args, message):
    process = run_invoke("bench", "mnist-cnn", *args, "--dry", timeout=60)
    assert process.returncode == 2 and message in process.stderr and "Traceback" not in process.stderr


def test_dry_run_prints_every_command_and_writes_nothing(tmp_path):
    out = tmp_path / "bench"
    process = run_invoke("bench", "cassava-resnet", "--rounds", "2", "--replicas", "1,2", "--out", str(out),
                         "--dry", timeout=60)
    assert_ok(process)
    commands = [line for line in process.stdout.splitlines() if line.startswith("+ ")]
    assert len(commands) == 2 * 7 + 1
    assert all("--weights none" in line for line in commands[:-1])  # the recipe's default train arguments
    assert "recipes/cassava-resnet/benchmark_input.py --json" in commands[-1]
    assert not out.exists()


def test_a_failing_run_is_reported_and_fails_the_task(tmp_path):
    process = run_invoke("bench", "mnist-cnn", "--launchers", "single", "--replicas", "1", "--rounds", "1",
                         "--out", str(tmp_path), "--", "--no-such-flag", timeout=120)
    assert process.returncode == 1
    assert "FAILED: exit status 2" in process.stdout and "1 of 1 runs failed" in process.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["rows"][0]["failed_rounds"] == 1 and report["rows"][0]["images_per_sec_median"] is None
    assert "--no-such-flag" in (tmp_path / "runs" / "round1-single-1.log").read_text()  # kept to read

