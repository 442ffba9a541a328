"""The cassava-resnet README stays true: the scripts it shows (in shell blocks, or in the text as
`python recipes/cassava-resnet/...`) exist and know their flags, its benchmark table is the kept
measurement, and the benchmark command runs."""
import json
import re
import shlex

import pytest

from helpers import REPO, assert_ok, run_python

RECIPE = REPO / "recipes" / "cassava-resnet"
README = RECIPE / "README.md"
MEASURED = REPO / "docs" / "bench" / "cassava-resnet" / "input-benchmark-2cpu.json"


def shown_python_commands():
    text = README.read_text()
    blocks = re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, flags=re.S)
    in_blocks = [shlex.split(line[line.index("python recipes/cassava-resnet/"):]) for block in blocks
                 for line in block.splitlines()
                 if "python recipes/cassava-resnet/" in line]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    in_text = [shlex.split(" ".join(span.split()))
               for span in re.findall(r"`(python recipes/cassava-resnet/[^`]+)`", prose)]
    return in_blocks + in_text


def test_readme_shows_every_script_of_the_recipe():
    scripts = {command[1] for command in shown_python_commands()}
    assert {"recipes/cassava-resnet/download_cassava.py", "recipes/cassava-resnet/generated_cassava.py",
            "recipes/cassava-resnet/train.py", "recipes/cassava-resnet/benchmark_input.py"} <= scripts


def test_every_shown_script_exists_and_knows_its_flags():
    helps = {}
    for command in shown_python_commands():
        script = command[1]
        assert (REPO / script).is_file(), script
        if script not in helps:
            process = run_python(script, "--help", timeout=120)
            assert_ok(process)
            helps[script] = process.stdout
        for flag in (arg.split("=")[0] for arg in command[2:] if arg.startswith("--")):
            assert flag in helps[script], f"{script} has no {flag}"


def test_the_readme_benchmark_table_is_the_kept_measurement():
    report = json.loads(MEASURED.read_text())
    text = README.read_text()
    pipes = report["pipelines"]
    for part in ("first_epoch", "later_epochs"):
        for name in ("seed", "ours"):
            run = pipes["summary"][name][part]
            row = f"{run['images_per_sec']:>9,.0f}{run['cpu_ms_per_image']:>12.2f}{run['first_batch_s']:>13.2f}"
            assert row in text, (name, part, row)
        ratio = pipes["ratio_ours_to_seed"][part]
        assert f"ours / seed, within each round: {ratio['median']:.2f}x (lowest {ratio['min']:.2f}x)" in text
    for name in ("seed", "ours"):
        memory = pipes["summary"][name]["memory"]
        assert f"{memory['peak_rss_mb']:>12,.0f}{memory['peak_above_start_mb']:>13,.0f}" in text, name
    assert f"{report['training_step']['images_per_sec']:,.1f} img/s" in text
    assert "python " + " ".join(report["command"]) in text


@pytest.mark.slow
def test_the_benchmark_runs_and_reports_every_figure(tmp_path):
    report_path = tmp_path / "report.json"
    process = run_python("recipes/cassava-resnet/benchmark_input.py", "--photos", "40", "--rounds", "1",
                         "--epochs", "2", "--image-size", "32", "--batch-size", "4", "--step-warmup", "1",
                         "--steps", "1", "--work-dir", str(tmp_path / "work"), "--json", str(report_path), timeout=600)
    assert_ok(process)
    report = json.loads(report_path.read_text())
    assert report["pipelines"]["photos"]["count"] == 40
    for name in ("seed", "ours"):
        assert report["pipelines"]["summary"][name]["first_epoch"]["images"] == 40
        assert report["pipelines"]["summary"][name]["later_epochs"]["images_per_sec"] > 0
    assert report["pipelines"]["ratio_ours_to_seed"]["first_epoch"]["median"] > 0
    assert report["training_step"]["timed_steps"] == 1 and report["training_step"]["images_per_sec"] > 0
    assert "ours / seed, within each round:" in process.stdout and "Training step alone" in process.stdout
