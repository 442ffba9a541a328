"""Benchmark the node's scene cache (scene_cache.py) against decoding the PNG files for every crop.

    python recipes/cityscapes-unet/benchmark_cache.py --json results/cache-benchmark.json
    python recipes/cityscapes-unet/benchmark_cache.py --data-dir data/cityscapes --json results/cache-real.json

On a prepared dataset (--data-dir, prepare_data.py's output; by default --scenes full-size fixture scenes,
generated and prepared under --work-dir by benchmark_input.py's prepare_inputs) it measures:
  (a) training crops/s on one core: tf.data with a private thread pool of one thread and no intra-op
      parallelism, a --crop crop at a random scale of 0.5..2.0 and a random flip, with the full preset's class
      ratio rule (--cat-max-ratio 0.75) and photometric distortion unless told otherwise (data.py's
      augmentation), the scene read from the PNG files and decoded
      every time (data.py without --cache) vs read from the node's cache (np.memmap); the files in the page
      cache after a warm-up pass; interleaved over --rounds rounds, medians reported;
  (b) the cache: the time and CPU to build it (once per node, on every core), its files' bytes, and the
      memory of a fresh process that maps it and reads every scene once (file pages, which the page cache
      holds once for every process of the node, and its own anonymous memory); scaled to Cityscapes' 2,975
      training scenes at 1024x2048, beside the in-memory --cache (a private copy in each of 8 processes);
  (c) from (a): the cores that feed --gpus GPUs at --iterations-per-second steps of --global-batch crops.
It prints the machine's reference loop too, before and after (ci/test.sh's: the seconds one core takes
for 10^7 Python additions), so that runs on different machines, or under other load, compare.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import tensorflow as tf  # noqa: E402

import data  # noqa: E402
import layout  # noqa: E402
import scene_cache  # noqa: E402
from benchmark_input import prepare_inputs, write_report  # noqa: E402
from tf_recipes import user_paths  # noqa: E402
from tf_recipes.data import InputShard  # noqa: E402
from tf_recipes.operations.pipeline_bench import memory_mb  # noqa: E402

CITYSCAPES_TRAIN = 2975
FULL_SIZE = (1024, 2048)
SCALE = (0.5, 2.0)
SEED = 0
# The reference loop ci/test.sh prints, the same program as ci/reference_loop.py's (a recipe folder stands alone)
REFERENCE_LOOP = """import time
started = time.perf_counter()
total = 0
for i in range(10 ** 7):
    total += i
print(f"{time.perf_counter() - started:.2f}")"""


def reference_loop_seconds() -> float:
    return float(subprocess.run([sys.executable, "-c", REFERENCE_LOOP], capture_output=True, text=True,
                                check=True).stdout)


def scene_decoder(prepared: pathlib.Path, index: dict, lookup):
    """data.py's per-example decode at the prepared size (its _fetcher's, without a shrink)."""
    def decode(image_file, label_file):
        return data._read_and_decode(image_file, label_file, index["height"], index["width"], index, lookup)
    return decode


def open_cache(prepared: pathlib.Path, cache_dir: pathlib.Path, log=lambda _: None) -> scene_cache.SceneArrays:
    index = data.read_index(prepared, "train")
    lookup = data.view(prepared)["lookup"]
    return scene_cache.cached_scenes(prepared, "train", index, scene_decoder(prepared, index, lookup),
                                     index["height"], index["width"], cache_dir, InputShard(1, 0, 1, 1),
                                     log=log, lookup=lookup)


# --- (a) the two training pipelines, on one core ----------------------------------------------------------

def one_core() -> tf.data.Options:
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    return options


def crops(fetch, scenes: int, count: int, crop, cat_max_ratio: float, photometric: bool) -> tf.data.Dataset:
    """`count` crops of the `scenes` in turn, each at its position's random scale, window and flip (and
    colours)."""
    positions = tf.data.Dataset.range(count)
    examples = positions.map(lambda p: (*fetch(p % scenes), p), num_parallel_calls=tf.data.AUTOTUNE)
    examples = examples.map(
        lambda image, truth, p: data._augment(image, truth, p, SEED, crop, SCALE, cat_max_ratio, photometric),
        num_parallel_calls=tf.data.AUTOTUNE)
    return examples.prefetch(2).with_options(one_core())


def png_fetch(prepared: pathlib.Path, index: dict, lookup):
    """data.py without --cache: the scene read and decoded for every crop."""
    image_files, label_files = data._file_names(prepared, "train", index)
    return data._fetcher(prepared, index, lookup, image_files, label_files, 1.0)


def cache_fetch(arrays: scene_cache.SceneArrays):
    """The scene copied out of the cache's mapped files."""
    def fetch(i):
        image, truth = tf.numpy_function(arrays.scene, [i], [tf.uint8, tf.uint8], stateful=False)
        return (tf.ensure_shape(image, [arrays.height, arrays.width, 3]),
                tf.ensure_shape(truth, [arrays.height, arrays.width]))
    return fetch


def measure(dataset: tf.data.Dataset) -> dict:
    """Crops/s after the first, and this process's CPU time (all threads) per crop."""
    iterator = iter(dataset)
    next(iterator)
    count, wall, cpu = 0, time.perf_counter(), time.process_time()
    for _ in iterator:
        count += 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"crops_per_sec": count / wall, "cpu_ms_per_crop": 1000 * cpu / count, "crops": count}


# --- (b) the memory of a process that maps the cache ---------------------------------------------------------

def map_and_read(prepared: pathlib.Path, cache_dir: pathlib.Path) -> dict:
    """In a fresh process: open the cache (it is there: nothing may be decoded), read every scene once."""
    logs, start = [], memory_mb()
    began = time.perf_counter()
    arrays = open_cache(prepared, cache_dir, logs.append)
    opened = time.perf_counter() - began
    began = time.perf_counter()
    checksum = 0
    for i in range(len(arrays)):
        image, truth = arrays.scene(i)
        checksum += int(image[::97, ::89].sum()) + int(truth[::97, ::89].sum())
    return {"open_s": round(opened, 3), "read_s": round(time.perf_counter() - began, 3), "logs": logs,
            "before": start, "after": memory_mb(), "checksum": checksum}


def child_map(prepared: pathlib.Path, cache_dir: pathlib.Path) -> dict:
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child-map", str(cache_dir),
               "--data-dir", str(prepared)]
    process = subprocess.run(command, capture_output=True, text=True, env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "2"})
    if process.returncode != 0:
        raise SystemExit(f"benchmark_cache: the process mapping the cache failed:\n{process.stderr[-3000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


# --- The run -------------------------------------------------------------------------------------------------

def run(prepared: pathlib.Path, work: pathlib.Path, config: dict) -> dict:
    index = data.read_index(prepared, "train")
    lookup = data.view(prepared)["lookup"]
    scenes, (height, width) = len(index["examples"]), (index["height"], index["width"])
    crop = data._output_size(prepared, height, width, 1, tuple(config["crop"]))  # a DataError if it does not fit
    count, rounds = config["crops_per_run"], config["rounds"]
    config |= {"scenes": scenes, "size": [height, width], "reference_loop_seconds_before": reference_loop_seconds()}
    cache_dir = pathlib.Path(tempfile.mkdtemp(prefix="scene-cache-", dir=work))  # a fresh cache: timed from empty
    try:
        print(f"building the scene cache of {scenes} scenes of {height}x{width} in {cache_dir} ...", flush=True)
        wall, cpu = time.perf_counter(), time.process_time()
        arrays = open_cache(prepared, cache_dir, lambda line: print(line, flush=True))
        build = {"seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}
        files = [pathlib.Path(arrays.folder, name) for name in os.listdir(arrays.folder)]
        cache_bytes = sum(path.stat().st_size for path in files)
        mapped = child_map(prepared, cache_dir)
        augment = (config["cat_max_ratio"], config["photometric"])
        variants = {"png_decode_every_crop": lambda: crops(png_fetch(prepared, index, lookup), scenes, count, crop,
                                                           *augment),
                    "node_cache_memmap": lambda: crops(cache_fetch(arrays), scenes, count, crop, *augment)}
        for make in variants.values():  # warm-up: the graphs, and the files in the page cache
            measure(make().take(scenes + 1))
        print(f"{rounds} rounds of {len(variants)} pipelines, {count} crops of {crop[0]}x{crop[1]} each, "
              "on one core ...", flush=True)
        runs = {name: [] for name in variants}
        for round_number in range(rounds):
            names = list(variants) if round_number % 2 == 0 else list(variants)[::-1]  # neither always first
            for name in names:
                runs[name].append(measure(variants[name]()))
    finally:
        shutil.rmtree(cache_dir)  # the benchmark's own temporary cache
    return summarise(prepared, config, build, cache_bytes, mapped, runs)


def summarise(prepared: pathlib.Path, config: dict, build: dict, cache_bytes: int, mapped: dict, runs: dict) -> dict:
    """The report: medians over the rounds, the cache's size and memory, scaled to Cityscapes, and the cores."""
    scenes, (height, width) = config["scenes"], config["size"]
    median = {name: {key: statistics.median(run[key] for run in values) for key in ("crops_per_sec", "cpu_ms_per_crop")}
              for name, values in runs.items()}
    per_scene = cache_bytes / scenes
    full_scene = per_scene * (FULL_SIZE[0] * FULL_SIZE[1]) / (height * width)
    crops_needed = config["iterations_per_second"] * config["global_batch"]
    cores = {name: crops_needed / figures["crops_per_sec"] for name, figures in median.items()}
    cores_by_cpu = {name: crops_needed * figures["cpu_ms_per_crop"] / 1000 for name, figures in median.items()}
    after, before = mapped["after"], mapped["before"]
    return {
        "date": datetime.date.today().isoformat(),
        "command": sys.argv,
        "data_dir": str(prepared),
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                    "python": platform.python_version(), "tensorflow": tf.__version__,
                    "reference_loop_seconds": [config.pop("reference_loop_seconds_before"), reference_loop_seconds()]},
        "config": config,
        "a_crops_per_core": {name: median[name] | {"rounds": values} for name, values in runs.items()},
        "b_cache": {
            "build_seconds": build["seconds"], "build_cpu_seconds": build["cpu_seconds"],
            "files_bytes": cache_bytes, "bytes_per_scene": per_scene,
            "mapping_process": {"open_s": mapped["open_s"], "read_s": mapped["read_s"],
                                "decoded_lines": [line for line in mapped["logs"] if "decoding" in line],
                                "file_mb_grew": round(after["file_mb"] - before["file_mb"], 1),
                                "anon_mb_grew": round(after["anon_mb"] - before["anon_mb"], 1),
                                "file_mb_after_pass": after["file_mb"], "file_mb_before": before["file_mb"],
                                "anon_mb_after_pass": after["anon_mb"], "anon_mb_before": before["anon_mb"],
                                "rss_mb_after_pass": after["rss_mb"]},
            "cityscapes_train_full_size": {
                "scenes": CITYSCAPES_TRAIN, "cache_gib": CITYSCAPES_TRAIN * full_scene / 2**30,
                "node_memory_gib_cache": CITYSCAPES_TRAIN * full_scene / 2**30,
                "node_memory_gib_in_memory_cache_8_processes": 8 * CITYSCAPES_TRAIN * FULL_SIZE[0] * FULL_SIZE[1] * 4
                / 2**30,
                "build_cpu_core_seconds": build["cpu_seconds"] / scenes * CITYSCAPES_TRAIN * full_scene / per_scene},
        },
        "c_cores_for_gpus": {"crops_per_sec_needed": crops_needed, "by_wall_rate": cores, "by_cpu_time": cores_by_cpu},
    }


def table(result: dict) -> str:
    config, machine, cache = result["config"], result["machine"], result["b_cache"]
    a, c = result["a_crops_per_core"], result["c_cores_for_gpus"]
    full, mapping = cache["cityscapes_train_full_size"], cache["mapping_process"]
    names = {"png_decode_every_crop": "PNG files, decoded for every crop", "node_cache_memmap": "node cache, np.memmap"}
    before, after = machine["reference_loop_seconds"]
    lines = [f"{result['date']}, {machine['cpus']} CPUs ({machine['processor']}), TF {machine['tensorflow']}, "
             f"reference loop {before:.2f} s before, {after:.2f} s after; {config['scenes']} scenes of "
             f"{config['size'][0]}x{config['size'][1]}, crops {config['crop'][0]}x{config['crop'][1]} at scale "
             f"{config['scale'][0]}..{config['scale'][1]} + flip, class ratio rule {config['cat_max_ratio']}, "
             f"photometric {'on' if config['photometric'] else 'off'}, {config['crops_per_run']} crops per run, "
             f"median of {config['rounds']} rounds",
             "",
             f"(a) one core             {'crops/s':>8} {'CPU ms/crop':>12}   (c) cores for {config['gpus']} GPUs at "
             f"{config['iterations_per_second']} it/s x {config['global_batch']} = {c['crops_per_sec_needed']:.0f} "
             "crops/s (by rate / by CPU time)"]
    for name, label in names.items():
        lines.append(f"    {label:<34}{a[name]['crops_per_sec']:8.1f} {a[name]['cpu_ms_per_crop']:12.1f}   "
                     f"{c['by_wall_rate'][name]:6.1f} / {c['by_cpu_time'][name]:.1f}")
    ratio = a["node_cache_memmap"]["crops_per_sec"] / a["png_decode_every_crop"]["crops_per_sec"]
    lines += [f"    the cache gives {ratio:.2f}x the crops per core", "",
              f"(b) the cache of {config['scenes']} scenes: built in {cache['build_seconds']:.1f} s "
              f"({cache['build_cpu_seconds']:.1f} s of CPU, all cores), {cache['files_bytes'] / 2**20:,.0f} MiB of "
              f"files ({cache['bytes_per_scene'] / 2**20:.2f} MiB a scene)",
              f"    a fresh process mapping it: opened in {mapping['open_s']:.2f} s ({len(mapping['decoded_lines'])} "
              f"decoding lines logged), every scene read in {mapping['read_s']:.2f} s; its resident file pages "
              "then grew by "
              f"{mapping['file_mb_grew']:,.0f} MB (the page cache's one copy, "
              "shared by every process of the node), its anonymous memory by "
              f"{mapping['anon_mb_grew']:,.0f} MB",
              f"    Cityscapes train ({full['scenes']:,} scenes at 1024x2048): {full['cache_gib']:.1f} GiB on disk and "
              f"{full['node_memory_gib_cache']:.1f} GiB of the node's page cache for all its processes, vs "
              f"{full['node_memory_gib_in_memory_cache_8_processes']:.0f} GiB for the in-memory --cache in 8 "
              f"processes; building it takes about {full['build_cpu_core_seconds'] / 3600:.2f} core-hours, once "
              f"(at the {config['scenes']} scenes' CPU per scene, start-up included)"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None,
                        help="an existing prepared dataset (prepare_data.py --out); default: generate --scenes "
                             "fixture scenes under --work-dir")
    parser.add_argument("--work-dir", default=None,
                        help="the generated fixture is kept here and reused, and the timed cache is built here and "
                             "removed (default: a temporary folder)")
    parser.add_argument("--scenes", type=int, default=8, help="fixture scenes (default 8; ignored with --data-dir)")
    parser.add_argument("--size", default="1024x2048", help="HEIGHTxWIDTH of the fixture (default 1024x2048)")
    parser.add_argument("--crop", default="512x1024", help="training crop HEIGHTxWIDTH (default 512x1024)")
    parser.add_argument("--cat-max-ratio", type=float, default=0.75,
                        help="the class ratio rule's largest share of one class in a crop, as the full preset's "
                             "(default 0.75; 1 turns it off)")
    parser.add_argument("--photometric", action=argparse.BooleanOptionalAction, default=True,
                        help="the full preset's photometric distortion (default: on)")
    parser.add_argument("--crops", type=int, default=32, help="crops per timed run (default 32)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are reported (default 5)")
    parser.add_argument("--iterations-per-second", type=float, default=2.0,
                        help="training steps per second to feed, for (c) (default 2.0)")
    parser.add_argument("--global-batch", type=int, default=16, help="crops per step, for (c) (default 16)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs of the node, for (c)'s label (default 8)")
    parser.add_argument("--json", default=None, help="also write the result to this file")
    parser.add_argument("--child-map", default=None, help=argparse.SUPPRESS)  # (b)'s process: JSON to stdout
    args = parser.parse_args(argv)
    if args.child_map:
        print(json.dumps(map_and_read(pathlib.Path(args.data_dir), pathlib.Path(args.child_map))))
        return 0
    if min(args.scenes, args.crops, args.rounds, args.global_batch, args.gpus) < 1 or args.iterations_per_second <= 0:
        parser.error("--scenes, --crops, --rounds, --global-batch, --gpus and --iterations-per-second must be positive")
    if not 0 < args.cat_max_ratio <= 1:
        parser.error(f"--cat-max-ratio {args.cat_max_ratio}: a share of the crop, above 0 and at most 1")
    try:
        size, crop = layout.parse_size(args.size), layout.parse_size(args.crop)
    except ValueError as error:
        parser.error(str(error))
    user_paths.exit_if((args.data_dir and user_paths.folder_problem("--data-dir", args.data_dir))
                       or user_paths.flags_problem({"--data-dir": args.data_dir}, {"--work-dir": args.work_dir},
                                                   {"--json": args.json}))
    with tempfile.TemporaryDirectory(prefix="cityscapes-cache-bench-") as temporary:
        work = pathlib.Path(args.work_dir or temporary)
        work.mkdir(parents=True, exist_ok=True)
        try:
            prepared = pathlib.Path(args.data_dir) if args.data_dir else prepare_inputs(work, args.scenes, size)
            config = {"crop": list(crop), "scale": list(SCALE), "cat_max_ratio": args.cat_max_ratio,
                      "photometric": args.photometric, "crops_per_run": args.crops, "rounds": args.rounds,
                      "iterations_per_second": args.iterations_per_second, "global_batch": args.global_batch,
                      "gpus": args.gpus}
            result = run(prepared, work, config)
        except data.DataError as error:
            raise SystemExit(f"error: {error}") from None
    return write_report(result, args.json, table)


if __name__ == "__main__":
    sys.exit(main())
