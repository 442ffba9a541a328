"""invoke bench: the pure parts of commands/bench.py, and the task run for real on mnist-cnn."""
import json
import math
import struct

import pytest

from commands import bench, launch
from helpers import REPO, assert_ok, run_invoke

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_SIZE = (round(bench.FIGURE_SIZE_INCHES[0] * bench.FIGURE_DPI), round(bench.FIGURE_SIZE_INCHES[1] * bench.FIGURE_DPI))


def png_size(path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature and that it decodes."""
    from PIL import Image

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", f"{path} is not a PNG"
    with Image.open(path) as image:
        image.load()  # decodes every pixel: a truncated or corrupt file fails here
    return struct.unpack(">II", data[16:24])


# -- options ---------------------------------------------------------------------------------------

def test_replica_counts_are_parsed_in_order():
    assert bench.parse_replicas("1,2,4") == [1, 2, 4]
    assert bench.parse_replicas(" 8, 1 ") == [8, 1]


@pytest.mark.parametrize("text,message", [("1,0", "at least 1"), ("1,two", "'two' is not a whole number"),
                                          ("2,2", "lists 2 twice"), ("-1", "must not be negative")])
def test_bad_replica_counts_are_named(text, message):
    with pytest.raises(launch.LaunchError, match=message):
        bench.parse_replicas(text)


def test_launchers_are_checked():
    assert bench.parse_launchers("horovod,single,horovod") == ["horovod", "single"]
    with pytest.raises(launch.LaunchError, match="unknown launcher 'ddp'; choose one of: single, mirrored"):
        bench.parse_launchers("single,ddp")


def test_default_replica_counts():
    assert bench.default_replicas(0) == [1, 2, 4]
    assert bench.default_replicas(8) == [1, 2, 4, 8]
    assert bench.default_replicas(2) == [1, 2]
    assert bench.default_replicas(6) == [1, 2, 4, 6]


def test_train_arguments_default_per_recipe_and_are_replaced_when_given():
    assert bench.train_args_for("mnist-cnn", []) == ["--synthetic", "--max-steps", "60", "--log-every", "60"]
    assert bench.train_args_for("mnist-cnn", ["--max-steps", "8"]) == ["--max-steps", "8"]
    assert set(bench.DEFAULT_TRAIN_ARGS) == set(launch.list_recipes(str(REPO)))


# -- the run list ----------------------------------------------------------------------------------

def test_runs_are_interleaved_round_by_round_and_single_runs_one_replica():
    runs = bench.plan_runs("mnist-cnn", list(launch.LAUNCHERS), [1, 2], 2, ["--synthetic"], "/r")
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
    assert multiworker.argv[2:5] == ["common.spawn", "--nproc", "2"]
    assert horovod.argv[:3] == ["horovodrun", "-np", "2"] and "--gloo" in horovod.argv


def test_runs_on_gpus_use_one_gpu_per_replica():
    runs = bench.plan_runs("mnist-cnn", ["mirrored", "horovod"], [1, 4], 1, [], "/r", gpus=4)
    horovod = runs[-1]
    assert horovod.argv[:3] == ["horovodrun", "-np", "4"] and "--gloo" not in horovod.argv
    assert all("--cpu-replicas" not in run.argv for run in runs)
    assert horovod.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and runs[0].env["CUDA_VISIBLE_DEVICES"] == "0"
    with pytest.raises(launch.LaunchError, match="--replicas 8 is more than --gpus 4"):
        bench.plan_runs("mnist-cnn", ["mirrored"], [1, 8], 1, [], "/r", gpus=4)


def test_nothing_to_measure_is_refused():
    with pytest.raises(launch.LaunchError, match="single runs only 1 replica"):
        bench.plan_runs("mnist-cnn", ["single"], [2, 4], 1, [], "/r")
    with pytest.raises(launch.LaunchError, match="--rounds 0"):
        bench.plan_runs("mnist-cnn", ["single"], [1], 0, [], "/r")


def test_input_benchmark_command_only_where_the_recipe_has_one():
    command = bench.input_benchmark_command("cassava-resnet", str(REPO), "/o/input.json", ["--photos", "64"])
    assert command == ["python", "recipes/cassava-resnet/benchmark_input.py", "--photos", "64", "--json", "/o/input.json"]
    assert bench.input_benchmark_command("cityscapes-unet", str(REPO), "/o/i.json")[-2:] == ["--json", "/o/i.json"]
    assert bench.input_benchmark_command("mnist-cnn", str(REPO), "/o/i.json") is None


# -- summary ---------------------------------------------------------------------------------------

def record(launcher, replicas, rate, round_number=1, **extra):
    return {"round": round_number, "launcher": launcher, "replicas": replicas, "images_per_sec": rate,
            "global_batch": 128 * replicas, "replicas_in_sync": True, **extra}


def test_medians_speedup_and_efficiency():
    records = [record("single", 1, rate) for rate in (100.0, 300.0, 120.0)]
    records += [record("horovod", 1, rate) for rate in (90.0, 110.0)]
    records += [record("horovod", 2, rate) for rate in (150.0, 170.0, 400.0)]
    records += [record("mirrored", 2, 180.0)]  # no 1-replica mirrored: compared with single
    rows = {(row["launcher"], row["replicas"]): row for row in bench.summarize(records)}
    assert rows[("single", 1)]["images_per_sec_median"] == 120.0
    assert rows[("single", 1)]["efficiency"] == 1.0
    assert rows[("horovod", 1)]["images_per_sec_median"] == 100.0  # median of an even count: the mean of the middle two
    horovod = rows[("horovod", 2)]
    assert horovod["images_per_sec_rounds"] == [150.0, 170.0, 400.0]
    assert horovod["speedup"] == pytest.approx(1.7) and horovod["efficiency"] == pytest.approx(0.85)
    assert horovod["vs_single"] == pytest.approx(170.0 / 120.0)
    assert rows[("mirrored", 2)]["efficiency"] == pytest.approx(180.0 / (2 * 120.0))
    assert [row["launcher"] for row in bench.summarize(records)] == ["single", "mirrored", "horovod", "horovod"]


def test_failed_rounds_are_left_out_of_the_median_and_counted():
    records = [record("mirrored", 1, 100.0), record("mirrored", 2, 150.0),
               record("mirrored", 2, None, 2, error="exit status 1"),
               record("multiworker", 2, None, error="exit status 4")]
    rows = {(row["launcher"], row["replicas"]): row for row in bench.summarize(records)}
    assert rows[("mirrored", 2)]["images_per_sec_median"] == 150.0 and rows[("mirrored", 2)]["failed_rounds"] == 1
    assert rows[("multiworker", 2)]["images_per_sec_median"] is None
    assert rows[("multiworker", 2)]["efficiency"] is None and rows[("multiworker", 2)]["failed_rounds"] == 1


CASSAVA_LIKE = {"benchmark": "cassava", "rounds": 3, "pipelines": {
    "seed": {"images_per_s": 779.7, "cpu_ms_per_image": 2.2},
    "ours_epoch": {"images_per_s": 9322.9},
    "ratio_ours_epoch_to_seed": 12.29,
    "rounds": {"seed": [{"images_per_s": 386.8}]}},
    "training_step": {"images_per_sec": 11.5, "batch": 32}}
CITYSCAPES_LIKE = {"date": "2026-11-21", "machine": {"cpus": 2}, "variants": {
    "raw_decode": {"images_per_s": 24.2, "rounds": [{"images_per_s": 23.9}]},
    "ours_1_pipeline": {"images_per_s": 21.98},
    "broken": {"images_per_s": None}, "flag": {"images_per_s": True}, "nan": {"images_per_s": math.nan},
    "nested": {"deeper": {"images_per_sec": 5}}}}


def test_input_rates_are_found_wherever_the_report_keeps_them():
    assert bench.input_rates(CASSAVA_LIKE) == {"pipelines.seed": 779.7, "pipelines.ours_epoch": 9322.9,
                                               "training_step": 11.5}
    assert bench.input_rates(CITYSCAPES_LIKE) == {"variants.raw_decode": 24.2, "variants.ours_1_pipeline": 21.98,
                                                  "variants.nested.deeper": 5.0}
    assert bench.input_rates({"unexpected": [1, 2]}) == {} and bench.input_rates([]) == {}


def test_input_section_reads_the_report_defensively(tmp_path):
    command = ["python", "recipes/cassava-resnet/benchmark_input.py", "--json", str(tmp_path / "i.json")]
    missing = bench.input_section("cassava-resnet", command, str(tmp_path / "i.json"))
    assert "no readable report" in missing["note"] and "rates" not in missing
    (tmp_path / "i.json").write_text("{not json")
    assert "no readable report" in bench.input_section("cassava-resnet", command, str(tmp_path / "i.json"))["note"]
    (tmp_path / "i.json").write_text(json.dumps(CASSAVA_LIKE))
    assert bench.input_section("cassava-resnet", command, str(tmp_path / "i.json"))["rates"]["pipelines.seed"] == 779.7
    assert "failed with status 1" in bench.input_section("cassava-resnet", command, str(tmp_path / "i.json"), 1)["note"]
    assert "in memory" in bench.input_section("mnist-cnn", None, None)["note"]


def report_for(records, input_section=None, gpus=0):
    return bench.build_report("mnist-cnn", records, command="invoke bench mnist-cnn", date="2026-11-22 01:10 UTC",
                              machine={"cpus": 2, "processor": "Test CPU",
                                       "load_average": {"before": [1.0, 1.0, 1.0], "after": [2.0, 1.5, 1.1]}},
                              gpus=gpus, rounds=2, train_args=["--synthetic", "--max-steps", "60"],
                              input_section=input_section or bench.input_section("mnist-cnn", None, None))


RECORDS = [record("single", 1, 1341.0, versions={"tensorflow": "2.17.1"}, load_average_1min=0.4),
           record("single", 1, 1300.0, 2, load_average_1min=3.1),
           record("horovod", 1, 1200.0), record("horovod", 2, 1580.0), record("horovod", 2, None, 2, error="exit 1")]


def test_markdown_table_names_every_configuration_and_says_what_cpu_efficiency_means():
    text = bench.render_markdown(report_for(RECORDS))
    assert "`invoke bench mnist-cnn`" in text and "2026-11-22 01:10 UTC" in text and "tensorflow 2.17.1" in text
    assert "| single | 1 | 128 | 1,320 | 1,341 / 1,300 | 1.00x | 1.00 |" in text
    assert "| horovod | 2 | 256 | 1,580 | 1,580 (1 failed) | 1.32x | 0.66 |" in text
    assert "shares the same 2 cores" in text and "not a speed-up" in text
    assert "in memory" in text and "[2.0, 1.5, 1.1]" in text
    assert "as each run ended: 0.4 to 3.1 (median 1.8) on 2 CPUs" in text
    assert "not a speed-up" not in bench.render_markdown(report_for(RECORDS, gpus=8))


def test_markdown_compares_input_rates_with_the_training_rate():
    section = {"command": "python recipes/cassava-resnet/benchmark_input.py --json x", "rates": {"seed": 660.0}}
    text = bench.render_markdown(report_for(RECORDS, section))
    assert "| seed | 660 | 0.50x |" in text and "(single, 1 replica: 1,320 img/s)" in text
    slow = report_for([record("single", 1, 0.456)], {"command": "c", "rates": {"seed": 39.9, "ours": 5359.8}})
    text = bench.render_markdown(slow)
    assert "| single | 1 | 128 | 0.46 | 0.46 |" in text and "| seed | 39.9 | 87.50x |" in text
    assert "| ours | 5,360 | 11,753.95x |" in text


def test_bar_labels_drop_the_path_every_input_figure_shares():
    assert bench._shared_prefix(["pipelines.summary.seed.first", "pipelines.summary.ours.first"]) == "pipelines.summary."
    assert bench._shared_prefix(["variants.raw", "two_workers.early"]) == ""
    assert bench._shared_prefix(["a.b.c"]) == ""


def test_plot_writes_a_png_of_the_fixed_size(tmp_path):
    for name, section in (("mnist", None), ("cassava", {"command": "c", "rates": {"seed": 660.0, "ours": 9000.0}})):
        path = tmp_path / f"{name}.png"
        bench.plot(report_for(RECORDS, section), str(path))
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


@pytest.mark.slow
def test_bench_measures_every_launcher_and_writes_table_json_and_png(tmp_path, require_horovod):
    out = tmp_path / "bench"
    process = run_invoke("bench", "mnist-cnn", "--replicas", "1,2", "--rounds", "1", "--out", str(out),
                         "--", "--synthetic", "--max-steps", "8", timeout=600)
    assert_ok(process)
    expected = [("single", 1), ("mirrored", 1), ("multiworker", 1), ("horovod", 1),
                ("mirrored", 2), ("multiworker", 2), ("horovod", 2)]

    report = json.loads((out / "bench.json").read_text())
    assert [(run["launcher"], run["replicas"]) for run in report["runs"]] == expected
    for run in report["runs"]:
        assert run["images_per_sec"] > 0 and run["replicas_in_sync"] and "error" not in run
        assert run["load_average_1min"] >= 0
        assert run["global_batch"] == 128 * run["replicas"] and run["timed_steps"] == 3  # 8 steps - 5 warm-up
    for row in report["rows"]:
        assert row["images_per_sec_median"] == row["images_per_sec_rounds"][0]
        assert row["efficiency"] == pytest.approx(row["speedup"] / row["replicas"])
    assert report["command"] == ("invoke bench mnist-cnn --replicas 1,2 --rounds 1 --out "
                                 f"{out} -- --synthetic --max-steps 8")
    assert report["versions"]["tensorflow"] == "2.17.1" and report["machine"]["cpus"] >= 1
    assert report["date"].endswith("UTC") and report["train_args"] == ["--synthetic", "--max-steps", "8"]
    assert "in memory" in report["input"]["note"]

    table = (out / "bench.md").read_text()
    for launcher, replicas in expected:
        row = next(row for row in report["rows"] if (row["launcher"], row["replicas"]) == (launcher, replicas))
        assert f"| {launcher} | {replicas} | {128 * replicas} | {bench._number(row['images_per_sec_median'])} |" in table
    assert table in process.stdout  # printed as well
    assert png_size(out / "bench.png") == PNG_SIZE
    assert not (out / "runs").exists()  # run folders are removed after a successful benchmark


# -- the kept measurement --------------------------------------------------------------------------

def test_the_readme_shows_the_kept_mnist_bench_and_its_command():
    kept = REPO / "docs" / "bench" / "mnist-cnn"
    report = json.loads((kept / "bench.json").read_text())
    readme = (REPO / "README.md").read_text()
    rows = [line for line in (kept / "bench.md").read_text().splitlines() if line.startswith("|")]
    assert len(rows) == 2 + len(report["rows"])  # header, rule and one row per configuration
    for row in rows:
        assert row in readme, row
    assert report["command"] in readme and report["git_revision"][:7] in readme
    assert report["date"][:10] in readme and (kept / "bench.png").is_file()
    png_size(kept / "bench.png")
