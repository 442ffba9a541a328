"""scene_cache.py: the cache holds what data.py's decode gives, every pipeline decodes only its own chunks and
all of them map the same arrays, a second run decodes nothing, a new index or view gets a new folder, a
damaged chunk is decoded again, too little disk is one line, and the memory is checked once per machine;
benchmark_cache.py crops as data.py augments, with the rule and colours it is given, and reports every figure."""
import json
import os
import shutil
import subprocess
import sys
import zlib

import numpy as np
import pytest
import tensorflow as tf

from helpers import REPO, recipe_module
from tf_recipes.data import DataError, InputShard

data = recipe_module("cityscapes-unet", "data")
layout = recipe_module("cityscapes-unet", "layout")
make_fixture = recipe_module("cityscapes-unet", "make_fixture")
prepare_data = recipe_module("cityscapes-unet", "prepare_data")
scene_cache = recipe_module("cityscapes-unet", "scene_cache")

TRAIN, SIZE = 8, (32, 64)
ONE = InputShard(1, 0, 1, 1)
TWO = [InputShard(2, p, 1, 2) for p in range(2)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("cityscapes")
    make_fixture.make_fixture(root / "source", train=TRAIN, val=0, size=SIZE, seed=3)
    assert prepare_data.prepare(root / "source", root / "prepared", splits=("train",), workers=1,
                                log=lambda *_: None) == []
    return root / "prepared"


@pytest.fixture(autouse=True)
def chunks_of_three(monkeypatch):
    monkeypatch.setattr(scene_cache, "CHUNK", 3)  # 8 scenes: chunks 0, 3 and 6, the last one short


class Decoder:
    """data.py's per-example decode (what its _fetcher maps: read, decode, the view's lookup, shrink to
    `factor`), noting the image file of every example it decodes."""

    def __init__(self, data_dir, view=None, factor=1.0, index=None):
        self.index = index or data.read_index(data_dir, "train")
        self.lookup = data.view(data_dir, view)["lookup"]
        self.factor, self.files = factor, []
        self.size = (round(self.index["height"] * factor), round(self.index["width"] * factor))

    def __call__(self, image_file, label_file):
        image, truth = data._read_and_decode(image_file, label_file, self.index["height"], self.index["width"],
                                             self.index, self.lookup)
        if self.factor < 1:
            image, truth = data._shrink(image, truth, self.factor)
        def note(name):  # bytes in a pipeline, a 0-d array when called eagerly
            self.files.append(np.asarray(name).item().decode())
            return np.int64(0)

        noted = tf.numpy_function(note, [image_file], tf.int64, stateful=True)
        with tf.control_dependencies([noted]):
            return tf.identity(image), tf.identity(truth)

    def example(self, data_dir, i):
        """Example i as decode gives it, eagerly, without noting it."""
        example_id = self.index["examples"][i]
        image, truth = data._read_and_decode(tf.constant(str(layout.prepared_image(data_dir, "train", example_id))),
                                             tf.constant(str(layout.prepared_labels(data_dir, "train", example_id))),
                                             self.index["height"], self.index["width"], self.index, self.lookup)
        if self.factor < 1:
            image, truth = data._shrink(image, truth, self.factor)
        return image.numpy(), truth.numpy()


def image_files(data_dir, examples, index=None):
    ids = (index or data.read_index(data_dir, "train"))["examples"]
    return sorted(str(layout.prepared_image(data_dir, "train", ids[i])) for i in examples)


def cached(data_dir, cache_dir, decoder, shard=ONE, barrier=lambda: None, log=None):
    return scene_cache.cached_scenes(data_dir, "train", decoder.index, decoder, *decoder.size, cache_dir, shard,
                                     barrier, log if log is not None else (lambda _: None), lookup=decoder.lookup)


def assert_holds_every_example(arrays, data_dir, decoder):
    assert len(arrays) == len(decoder.index["examples"])
    images, truth = arrays.gather(np.arange(len(arrays)))
    assert images.dtype == truth.dtype == np.uint8
    assert images.shape == (len(arrays), *decoder.size, 3) and truth.shape == (len(arrays), *decoder.size)
    for i in range(len(arrays)):
        image, labels = decoder.example(data_dir, i)
        np.testing.assert_array_equal(images[i], image)
        np.testing.assert_array_equal(truth[i], labels)
        np.testing.assert_array_equal(arrays.scene(i)[1], labels)


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_the_cache_holds_what_decode_gives_for_every_example(data_dir, tmp_path, factor):
    decoder = Decoder(data_dir, factor=factor)
    arrays = cached(data_dir, tmp_path, decoder)
    assert_holds_every_example(arrays, data_dir, decoder)
    assert sorted(decoder.files) == image_files(data_dir, range(TRAIN))  # each example decoded once
    assert len(np.unique(arrays.gather(np.arange(TRAIN))[0].reshape(TRAIN, -1), axis=0)) == TRAIN
    assert sorted(os.listdir(arrays.folder)) == sorted(f"{start:06d}-{kind}" for start in (0, 3, 6)
                                                       for kind in ("images.npy", "truth.npy", "crc32.npy", "checked"))
    assert isinstance(arrays.chunks[0][0], np.memmap)


# ## Two input pipelines sharing one folder, as two real processes

def run_pipeline(data_dir, cache_dir, barrier_dir, pipeline):
    """One input pipeline of two (a child process of the test below): its decoded files, log lines, memory
    checks and the crc32 of all the arrays it maps, as JSON on stdout."""
    import time

    pipeline = int(pipeline)
    scene_cache.CHUNK = 2  # 4 chunks: 2 for each pipeline
    checks = []
    scene_cache.available_memory_bytes = lambda: checks.append(1) or 1  # the cache never fits: a line

    def barrier():  # files, as a job's collective would
        open(os.path.join(barrier_dir, str(pipeline)), "w").close()
        deadline = time.time() + 120
        while not all(os.path.exists(os.path.join(barrier_dir, str(p))) for p in range(2)):
            assert time.time() < deadline, "the other pipeline never reached the barrier"
            time.sleep(0.02)

    decoder, logs = Decoder(data_dir), []
    arrays = cached(data_dir, cache_dir, decoder, TWO[pipeline], barrier, logs.append)
    images, truth = arrays.gather(np.arange(len(arrays)))
    print(json.dumps({"decoded": sorted(decoder.files), "logs": logs, "memory_checks": len(checks),
                      "crc32": [zlib.crc32(images), zlib.crc32(truth)], "folder": arrays.folder}))


def test_two_pipelines_in_two_processes_decode_their_own_chunks_and_map_the_same_arrays(data_dir, tmp_path):
    (tmp_path / "barrier").mkdir()
    program = ("import sys; sys.path[:0] = sys.argv[1:4]; import test_scene_cache; "
               "test_scene_cache.run_pipeline(*sys.argv[4:])")
    paths = [str(REPO), str(REPO / "tests"), os.path.dirname(__file__)]
    children = [subprocess.Popen([sys.executable, "-c", program, *paths, str(data_dir), str(tmp_path / "cache"),
                                  str(tmp_path / "barrier"), str(p)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}) for p in range(2)]
    outputs = [child.communicate(timeout=240) for child in children]
    assert [child.returncode for child in children] == [0, 0], outputs
    results = [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]
    # Pipeline p decoded examples [4p, 4p + 4): its two chunks, and nothing after the barrier
    assert [r["decoded"] for r in results] == [image_files(data_dir, range(4 * p, 4 * p + 4)) for p in range(2)]
    assert results[0]["folder"] == results[1]["folder"]
    assert results[0]["crc32"] == results[1]["crc32"]
    decoder = Decoder(data_dir)
    expected = [decoder.example(data_dir, i) for i in range(TRAIN)]
    assert results[0]["crc32"] == [zlib.crc32(np.stack([e[k] for e in expected])) for k in range(2)]
    # One check of the machine's memory, and its one line, whichever process took the lock first
    assert sorted(r["memory_checks"] for r in results) == [0, 1]
    lines = [line for r in results for line in r["logs"] if "page cache" in line]
    assert len(lines) == 1 and "from disk again (nothing is decoded again)" in lines[0], lines
    assert [line for r in results for line in r["logs"] if "page cache" in line] == [
        line for r in results if r["memory_checks"] for line in r["logs"] if "page cache" in line]
    assert not [name for name in os.listdir(results[0]["folder"]) if name.endswith((".lock", ".tmp"))]


def test_the_memory_check_runs_in_the_first_pipeline_of_a_machine_only(data_dir, tmp_path, monkeypatch):
    """Pipeline 1 runs inside pipeline 0's barrier, in this process: it is on the same machine."""
    checks, logs, decoders = [], [], [Decoder(data_dir), Decoder(data_dir)]
    monkeypatch.setattr(scene_cache, "available_memory_bytes", lambda: checks.append(1) or 1)
    second = {}

    def barrier():
        second["arrays"] = cached(data_dir, tmp_path, decoders[1], TWO[1], log=logs.append)
        assert checks == [1]  # pipeline 0 checked before writing; pipeline 1 did not

    first = cached(data_dir, tmp_path, decoders[0], TWO[0], barrier, logs.append)
    assert checks == [1]
    assert len([line for line in logs if "page cache" in line]) == 1
    assert [sorted(decoder.files) for decoder in decoders] == [image_files(data_dir, range(3)),
                                                                image_files(data_dir, range(3, 8))]
    np.testing.assert_array_equal(first.gather(np.arange(TRAIN))[1], second["arrays"].gather(np.arange(TRAIN))[1])
    # When the cache fits in memory, the check says nothing
    monkeypatch.setattr(scene_cache, "available_memory_bytes", lambda: checks.append(1) or 2**40)
    logs.clear()
    cached(data_dir, tmp_path, Decoder(data_dir), log=logs.append)
    assert logs == [] and checks == [1, 1]


def test_two_nodes_with_folders_of_their_own_each_decode_the_other_share_after_the_barrier(data_dir, tmp_path):
    """Node B's pipeline runs inside node A's barrier; each caches into its own node-local folder."""
    decoders, logs, second = [Decoder(data_dir), Decoder(data_dir)], [[], []], {}

    def barrier():
        second["arrays"] = cached(data_dir, tmp_path / "b", decoders[1], TWO[1], log=logs[1].append)

    first = cached(data_dir, tmp_path / "a", decoders[0], TWO[0], barrier, logs[0].append)
    # each its own share, then (after the barrier) the other's, which its folder lacks
    assert sorted(decoders[0].files[:3]) == image_files(data_dir, range(3))
    assert sorted(decoders[1].files[:5]) == image_files(data_dir, range(3, 8))
    assert [sorted(decoder.files) for decoder in decoders] == [image_files(data_dir, range(TRAIN))] * 2
    assert all(any("still missing" in line and "another node's" in line for line in lines) for lines in logs)
    for arrays in (first, second["arrays"]):
        assert_holds_every_example(arrays, data_dir, decoders[0])


# ## Reuse, and what makes a new folder

def test_a_second_run_decodes_nothing_and_a_new_index_or_view_makes_a_new_folder(data_dir, tmp_path):
    copy = tmp_path / "prepared"
    shutil.copytree(data_dir, copy)
    first = cached(copy, tmp_path / "cache", Decoder(copy))
    again = Decoder(copy)
    assert cached(copy, tmp_path / "cache", again).folder == first.folder and again.files == []

    categories = Decoder(copy, view="categories")
    by_category = cached(copy, tmp_path / "cache", categories)
    assert by_category.folder != first.folder and len(categories.files) == TRAIN
    assert_holds_every_example(by_category, copy, categories)
    assert not np.array_equal(by_category.gather(np.arange(TRAIN))[1], first.gather(np.arange(TRAIN))[1])

    index_file = layout.index_path(copy, "train")
    index = json.loads(index_file.read_text())
    dropped = index["examples"].pop()
    del index["bytes"][dropped]
    index_file.write_text(json.dumps(index))  # prepared again with one scene fewer
    fewer = Decoder(copy, index=index)
    smaller = cached(copy, tmp_path / "cache", fewer)
    assert smaller.folder not in (first.folder, by_category.folder) and len(smaller) == TRAIN - 1
    assert len(fewer.files) == TRAIN - 1
    assert_holds_every_example(smaller, copy, fewer)
    assert len(os.listdir(tmp_path / "cache")) == 3


# ## Damaged chunks

def test_a_truncated_or_corrupted_chunk_is_decoded_again(data_dir, tmp_path, monkeypatch):
    arrays = cached(data_dir, tmp_path, Decoder(data_dir))
    folder = arrays.folder
    del arrays
    images = os.path.join(folder, "000000-images.npy")
    os.truncate(images, os.path.getsize(images) // 2)  # a copy cut short
    truth = os.path.join(folder, "000003-truth.npy")
    with open(truth, "r+b") as handle:  # bytes that never reached the disk before a crash ...
        handle.seek(-64, os.SEEK_END)
        handle.write(bytes([77]) * 64)  # (no label: they differ from what was there)
    monkeypatch.setattr(scene_cache, "_boot_id", lambda: "after-the-crash")  # ... found after the reboot
    decoder, logs = Decoder(data_dir), []
    arrays = cached(data_dir, tmp_path, decoder, log=logs.append)
    assert sorted(decoder.files) == image_files(data_dir, range(6))  # chunks 0 and 3
    assert [line for line in logs if "damaged" in line] == [
        f"{truth} is damaged (example 5 does not match its crc32, e.g. zeros "
        "after a crash): decoding its chunk again"]
    assert_holds_every_example(arrays, data_dir, decoder)
    again = Decoder(data_dir)
    cached(data_dir, tmp_path, again)
    assert again.files == []


def test_a_chunk_still_damaged_after_decoding_it_again_is_one_line(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(scene_cache, "_boot_id", lambda: None)  # no boot to trust: every read is checksummed
    monkeypatch.setattr(scene_cache, "_damaged", lambda *_: (0, "images"))  # a disk that does not keep its data
    with pytest.raises(DataError) as error:
        cached(data_dir, tmp_path, Decoder(data_dir))
    message = str(error.value)
    assert "\n" not in message and "000000-images.npy is still damaged after being decoded again" in message
    assert "delete" in message


# ## Bad input and too little disk: one line, nothing written

def test_too_little_disk_is_one_line_before_anything_is_decoded(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(scene_cache, "_free_bytes", lambda folder: 4096)  # below the 64 KiB it needs
    decoder = Decoder(data_dir, view="categories")
    with pytest.raises(DataError) as error:
        cached(data_dir, tmp_path, decoder)
    message, (folder,) = str(error.value), os.listdir(tmp_path)
    assert "\n" not in message and str(tmp_path / folder) in message
    need = TRAIN * SIZE[0] * SIZE[1] * 4 / 2**30
    assert f"needs {need:.2f} GiB more" in message and "only 0.00 GiB is free" in message
    assert "--cache-dir" in message and "without --cache" in message
    assert decoder.files == [] and os.listdir(tmp_path / folder) == []
    # A complete cache needs no more room
    monkeypatch.undo()
    monkeypatch.setattr(scene_cache, "CHUNK", 3)
    cached(data_dir, tmp_path, Decoder(data_dir, view="categories"))
    monkeypatch.setattr(scene_cache, "_free_bytes", lambda folder: 0)
    assert len(cached(data_dir, tmp_path, Decoder(data_dir, view="categories"))) == TRAIN


def test_an_undecodable_scene_is_one_line_naming_its_file(data_dir, tmp_path):
    copy = tmp_path / "prepared"
    shutil.copytree(data_dir, copy)
    decoder = Decoder(copy)
    bad = layout.prepared_image(copy, "train", decoder.index["examples"][4])
    content = bad.read_bytes()
    bad.write_bytes(content[:40] + bytes(len(content) - 40))  # the header read_index checks, then nothing
    with pytest.raises(DataError) as error:
        cached(copy, tmp_path / "cache", decoder)
    message = str(error.value)
    assert "\n" not in message and str(bad) in message and "example 4 of the prepared train split" in message
    (folder,) = os.listdir(tmp_path / "cache")
    assert not [name for name in os.listdir(tmp_path / "cache" / folder) if name.endswith(".tmp")]


@pytest.mark.full  # a benchmark's run, the night's
@pytest.mark.parametrize("augment", [[], ["--cat-max-ratio", "1", "--no-photometric"]], ids=["full-preset", "plain"])
def test_the_cache_benchmark_reads_the_given_data_dir_and_reports_every_figure(data_dir, tmp_path, augment):
    report_path = tmp_path / "report.json"
    process = subprocess.run([sys.executable, str(REPO / "recipes" / "cityscapes-unet" / "benchmark_cache.py"),
                              "--data-dir", str(data_dir), "--work-dir", str(tmp_path / "work"), "--crop", "16x32",
                              "--crops", "4", "--rounds", "1", *augment, "--json", str(report_path)],
                             cwd=REPO, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert process.returncode == 0, process.stderr[-4000:]
    report = json.loads(report_path.read_text())
    config = report["config"]
    assert (config["scenes"], config["size"], config["crop"]) == (TRAIN, list(SIZE), [16, 32])
    assert (config["cat_max_ratio"], config["photometric"]) == ((0.75, True) if not augment else (1.0, False))
    for figures in report["a_crops_per_core"].values():
        assert figures["crops_per_sec"] > 0 and figures["cpu_ms_per_crop"] > 0
        assert [run["crops"] for run in figures["rounds"]] == [3]  # the first of 4 is not timed
    cache = report["b_cache"]
    assert cache["files_bytes"] > 0 and cache["mapping_process"]["decoded_lines"] == []  # mapped, not decoded
    assert set(report["c_cores_for_gpus"]["by_wall_rate"]) == {"png_decode_every_crop", "node_cache_memmap"}
    assert os.listdir(tmp_path / "work") == []  # its timed cache removed, nothing else written there
    assert "the cache gives" in process.stdout


def test_the_cache_benchmark_refuses_a_class_ratio_that_is_no_share(data_dir, tmp_path):
    process = subprocess.run([sys.executable, str(REPO / "recipes" / "cityscapes-unet" / "benchmark_cache.py"),
                              "--data-dir", str(data_dir), "--cat-max-ratio", "1.5"], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == 2 and "--cat-max-ratio 1.5: a share of the crop" in process.stderr


def test_the_cache_benchmark_crops_as_data_py_augments_with_the_rule_and_colours_it_is_given(data_dir):
    benchmark = recipe_module("cityscapes-unet", "benchmark_cache")
    index, lookup = data.read_index(data_dir, "train"), data.view(data_dir)["lookup"]
    fetch = benchmark.png_fetch(data_dir, index, lookup)
    timed = {}
    for ratio, colours in ((0.75, True), (1.0, False)):
        timed[colours] = list(benchmark.crops(fetch, TRAIN, 3, (16, 32), ratio, colours))
        for position, (image, truth) in enumerate(timed[colours]):
            scene = fetch(tf.constant(position, tf.int64))
            want = data._augment(*scene, position, benchmark.SEED, (16, 32), benchmark.SCALE, ratio, colours)
            np.testing.assert_array_equal(image, want[0])
            np.testing.assert_array_equal(truth, want[1])
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(timed[True], timed[False], strict=True))
