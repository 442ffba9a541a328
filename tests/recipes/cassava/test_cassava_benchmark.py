"""benchmark_input.py: it times the seed's pipeline as the seed wrote it, runs on tiny data in seconds,
reports every figure, and reads an existing prepared dataset when given --data-dir."""
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from dataset_graph import stages
from helpers import assert_ok, recipe_module, run_python

input_pipeline = recipe_module("cassava-resnet", "input_pipeline")


def test_the_seed_pipeline_maps_in_parallel_then_caches_then_shuffles_1000(cassava_data_dir):
    chain = stages(input_pipeline.seed_train_dataset(str(cassava_data_dir), global_batch=8, image_size=32))
    tail = [stage.op for stage in chain[-5:]]
    assert tail == ["ParallelMapDatasetV2", "CacheDatasetV2", "ShuffleDatasetV3", "BatchDatasetV2", "PrefetchDataset"]
    resize, cache, shuffle, batch, _ = chain[-5:]
    assert resize.constants == [tf.data.AUTOTUNE]  # num_parallel_calls
    assert {"ResizeBilinear", "RealDiv"} <= resize.function_ops
    assert cache.constants[0] == b""  # no file name: in memory
    assert shuffle.constants[0] == 1000 and batch.constants[0] == 8


def test_the_seed_pipeline_reads_the_files_only_in_its_first_epoch(cassava_data_dir, tmp_path):
    data_dir = tmp_path / "tfds"
    shutil.copytree(cassava_data_dir, data_dir)
    dataset = input_pipeline.seed_train_dataset(str(data_dir), global_batch=8, image_size=32, seed=0)
    first = np.concatenate([labels for _, labels in dataset.as_numpy_iterator()])
    for record_file in data_dir.glob("cassava/*/*.tfrecord*"):
        record_file.write_bytes(b"")  # a later epoch that read the files again would fail or come up short
    later = np.concatenate([labels for _, labels in dataset.as_numpy_iterator()])
    assert len(first) == len(later) == 24
    assert sorted(first.tolist()) == sorted(later.tolist())


@pytest.mark.full  # a benchmark's run, the night's
def test_the_benchmark_reads_the_given_data_dir_and_reports_every_figure(cassava_data_dir, tmp_path):
    work, report_path = tmp_path / "work", tmp_path / "report.json"
    process = run_python("recipes/cassava-resnet/benchmark_input.py", "--data-dir", str(cassava_data_dir),
                         "--work-dir", str(work), "--image-size", "32", "--batch-size", "4", "--epochs", "2",
                         "--rounds", "1", "--skip-step", "--json", str(report_path), timeout=300)
    assert_ok(process)
    assert not list(work.glob("cassava-*-photos")), "generated photos although --data-dir was given"
    assert not list(work.iterdir()), "our cache was left behind"
    report = json.loads(report_path.read_text())
    assert report["data_dir"] == str(cassava_data_dir) and report["pipelines"]["photos"]["count"] == 24
    summary = report["pipelines"]["summary"]
    for name in ("seed", "ours"):
        for epoch in ("first_epoch", "later_epochs"):
            assert summary[name][epoch]["images_per_sec"] > 0 and summary[name][epoch]["cpu_ms_per_image"] > 0
        assert [len(run["epochs"]) for run in report["pipelines"]["rounds"][name]] == [2]
        assert all(epoch["images"] == 24 for epoch in report["pipelines"]["rounds"][name][0]["epochs"])
        memory = summary[name]["memory"]
        assert memory["peak_rss_mb"] >= memory["start_rss_mb"] > 0
    # float32 batches for the seed, uint8 for ours
    assert summary["seed"]["bytes_per_image_to_device"] == 32 * 32 * 3 * 4
    assert summary["ours"]["bytes_per_image_to_device"] == 32 * 32 * 3
    ratio = report["pipelines"]["ratio_ours_to_seed"]
    assert set(ratio) == {"first_epoch", "later_epochs"} and ratio["first_epoch"]["median"] > 0
    assert "first epoch:" in process.stdout and "later epochs:" in process.stdout and "peak RSS" in process.stdout


def test_a_data_dir_without_cassava_is_named(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    process = run_python("recipes/cassava-resnet/benchmark_input.py", "--data-dir", str(data),
                         "--work-dir", str(tmp_path / "work"), "--skip-step", timeout=120)
    assert process.returncode != 0 and "not prepared in" in process.stderr and str(data) in process.stderr
    assert not (tmp_path / "work").exists() or not list((tmp_path / "work").glob("cassava-*-photos"))


@pytest.mark.slow
@pytest.mark.full  # a benchmark's run, the night's
def test_the_benchmark_runs_on_generated_photos_and_reports_every_figure(tmp_path):
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
