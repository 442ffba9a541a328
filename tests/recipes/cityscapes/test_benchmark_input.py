"""benchmark_input.py: the seed's loader is timed as the seed wrote it (read before the shard, then
parallel decode, one-hot, repeat, shuffle 128), the benchmark runs on tiny data, reports every
figure, and reads an existing prepared dataset when given --data-dir."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dataset_graph import stages
from helpers import REPO, recipe_module

benchmark_input = recipe_module("cityscapes-unet", "benchmark_input")
make_fixture = recipe_module("cityscapes-unet", "make_fixture")
prepare_data = recipe_module("cityscapes-unet", "prepare_data")
SCRIPT = REPO / "recipes" / "cityscapes-unet" / "benchmark_input.py"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("cityscapes-bench")
    make_fixture.make_fixture(root / "source", train=8, val=0, size=(32, 64), seed=5)
    assert prepare_data.prepare(root / "source", root / "prepared", splits=("train",), workers=1,
                                log=lambda *_: None) == []
    return root / "prepared"


@pytest.mark.parametrize("workers, worker, cpus", [(1, 0, 8), (2, 1, 8), (4, 3, 2)])
def test_the_seed_loader_reads_every_file_before_the_shard_then_decodes_in_parallel(prepared, workers, worker, cpus):
    chain = stages(benchmark_input.seed_loader(prepared, batch=3, num_workers=workers, worker=worker, cpus=cpus))
    ops = [stage.op for stage in chain]
    shard = ops.index("ShardDataset")
    read = chain[shard - 1]
    assert read.op == "MapDataset" and "ReadFile" in read.function_ops  # not parallel, before the shard
    assert chain[shard].constants == [workers, worker]
    assert not any("ReadFile" in stage.function_ops for stage in chain[shard + 1:])
    decode, cast, one_hot = chain[shard + 1:shard + 4]
    assert all(stage.op == "ParallelMapDatasetV2" for stage in (decode, cast, one_hot))
    assert {stage.constants[0] for stage in (decode, cast, one_hot)} == {max(cpus // workers, 1)}
    assert "DecodeJpeg" in decode.function_ops and "Cast" in cast.function_ops and "OneHot" in one_hot.function_ops
    assert ops[shard + 4:] == ["RepeatDataset", "ShuffleDatasetV3", "BatchDatasetV2", "PrefetchDataset"]
    assert chain[shard + 5].constants[0] == 128 and chain[shard + 6].constants[0] == 3


def test_the_seed_loader_yields_float_images_and_one_hot_categories(prepared):
    images, categories = next(iter(benchmark_input.seed_loader(prepared, batch=2)))
    assert images.dtype.name == "float32" and tuple(images.shape) == (2, 32, 64, 3)
    assert float(images.numpy().max()) > 1.0  # 0..255: the seed cast without scaling
    assert categories.dtype.name == "float32" and tuple(categories.shape) == (2, 32, 64, 8)
    # 8 channels, as the seed's: the prepared maps hold label ids, and those of 8 and up one-hot to zeros
    assert set(np.unique(categories.numpy().sum(axis=-1))) <= {0.0, 1.0}


def run_benchmark(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


@pytest.mark.full  # a benchmark's run, the night's
def test_the_benchmark_reads_the_given_data_dir_and_reports_every_figure(prepared, tmp_path):
    work, report_path = tmp_path / "work", tmp_path / "report.json"
    process = run_benchmark("--data-dir", str(prepared), "--work-dir", str(work), "--rounds", "1",
                            "--epochs", "2", "--json", str(report_path))
    assert process.returncode == 0, process.stderr[-4000:]
    assert not (work / "source").exists() and not (work / "prepared").exists(), "generated a fixture"
    report = json.loads(report_path.read_text())
    assert report["data_dir"] == str(prepared) and report["config"]["pairs"] == 8
    assert report["config"]["size"] == [32, 64]
    children = report["epochs_and_memory"]
    assert set(children) == {"seed_1", "ours_1", "seed_w0", "ours_w0"}
    for name, summary in children.items():
        [run] = summary["rounds"]
        per_worker = 8 if name.endswith("_1") else 4
        assert [epoch["images"] for epoch in run["epochs"]] == [per_worker, per_worker]
        assert summary["first_epoch"]["images_per_sec"] > 0 and summary["later_epochs"]["images_per_sec"] > 0
        assert summary["memory"]["peak_rss_mb"] >= summary["memory"]["start_rss_mb"] > 0
    ratios = report["ratios"]["ours_vs_seed_loader"]
    assert set(ratios) == {"1_worker", "worker_0_of_2"}
    assert all(set(ratio) == {"first_epoch", "later_epochs"} for ratio in ratios.values())
    assert "ours / seed loader, 1 worker" in process.stdout and "peak RSS MB" in process.stdout


def test_a_data_dir_without_prepared_data_is_named(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    process = run_benchmark("--data-dir", str(data), "--work-dir", str(tmp_path / "work"))
    assert process.returncode != 0
    assert f"no prepared 'train' data: {data}" in process.stderr and "prepare_data.py" in process.stderr
