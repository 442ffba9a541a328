"""Benchmark the Cityscapes input pipeline against the decode limit, late sharding and the seed's loader.

    python recipes/cityscapes-unet/benchmark_input.py --json results/input-benchmark.json
    python recipes/cityscapes-unet/benchmark_input.py --data-dir data/cityscapes --pairs 0 --json results/real.json

Times, on a prepared dataset (--data-dir, prepare_data.py's output; by default --pairs full-size
fixture pairs, generated and prepared under --work-dir), interleaved over several rounds (medians
reported, so the numbers share the machine's load):
  - in this process, the first element of every run excluded, files read from the page cache after
    a warm-up pass:
      - raw decode: read + tf.io.decode_png of the same files, parallel, nothing else: the ceiling;
      - our training pipeline (data.make_train_dataset, full resolution, random flip);
      - 2 workers, early vs late sharding: each worker's pipeline timed alone, as if on its own
        machine; the job takes as long as its slower worker;
      - storage formats: the prepared PNG files vs TFRecord shards of the same PNG bytes vs
        TFRecord shards of raw uint8 pixels (written under --work-dir);
  - each in a process of its own, epoch by epoch (the first epoch includes building the pipeline),
    with its peak resident memory: the seed's loader as the seed wrote it (seed_loader below) and
    ours, for 1 worker and for worker 0 of 2.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import tensorflow as tf  # noqa: E402

import data  # noqa: E402
import layout  # noqa: E402
import make_fixture  # noqa: E402
import scene_cache  # noqa: E402
import prepare_data  # noqa: E402
from tf_recipes import user_paths  # noqa: E402
from tf_recipes.atomic import replace_durably  # noqa: E402
from tf_recipes.data import InputShard, sharded_order  # noqa: E402
from tf_recipes.operations.pipeline_bench import memory_mb, memory_since, ratios_within_rounds, summarise_epochs  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE
SEED = 0
SEED_SHUFFLE_BUFFER = 128  # the seed's shuffle(buffer_size=SEED_SHUFFLE_BUFFER)
SEED_CATEGORIES = 8  # the seed one-hot encodes its 8 categories (void included)
CHILDREN = ("seed_1", "ours_1", "seed_w0", "ours_w0")  # pipeline _ 1 worker, or worker 0 of 2


def measure(dataset: tf.data.Dataset) -> dict:
    """Examples/s after the first element, and this process's CPU time (all threads) per example.

    CPU time per example hardly depends on what else runs on the machine, so it backs up the
    wall-clock rates when other jobs share the cores.
    """
    iterator = iter(dataset)
    next(iterator)
    count, wall, cpu = 0, time.perf_counter(), time.process_time()
    for element in iterator:
        count += int(tf.nest.flatten(element)[0].shape[0])  # examples = leading dimension of batches
    return {"images_per_sec": count / (time.perf_counter() - wall),
            "cpu_ms_per_image": 1000 * (time.process_time() - cpu) / count, "count": count}


# --- The variants --------------------------------------------------------------------------------

def raw_decode(files, with_labels: bool) -> tf.data.Dataset:
    def decode(image_file, category_file):
        image = tf.io.decode_png(tf.io.read_file(image_file), channels=3)
        if not with_labels:
            return image
        return image, tf.io.decode_png(tf.io.read_file(category_file), channels=1)
    return tf.data.Dataset.from_tensor_slices(files).map(decode, AUTOTUNE).batch(1).prefetch(AUTOTUNE)


def seed_loader(prepared: pathlib.Path, batch: int, num_workers: int = 1, worker: int = 0,
                cpus: int | None = None) -> tf.data.Dataset:
    """The seed workshop's Horovod loader (its hvd/data_loader.py), step for step, on prepared data
    (its img/ and gt_cat/ folders are like our images/ and labels/, its maps holding the 8 category ids):

      - list the image files (Dataset.list_files: shuffled, unseeded, so every worker lists them in
        its own random order);
      - map, not parallel: read the image file and its category file (every worker reads every file);
      - shard(num_workers, worker): only now does a worker keep its share;
      - maps with num_parallel_calls = cpus // num_workers (the seed: cpu_count() // num_gpus):
        decode both with decode_jpeg (TF's decoder sniffs PNG), cast the image to float32 (0..255)
        and the categories to uint8, one-hot the categories to 8 float32 channels;
      - repeat, shuffle(128), batch (per worker), prefetch.
    """
    calls = max((cpus or os.cpu_count()) // num_workers, 1)  # the seed's value would be 0 with more GPUs than cores

    def read_pair(image_file):
        category_file = tf.strings.regex_replace(image_file, "/images/", "/labels/")
        return tf.io.read_file(image_file), tf.io.read_file(category_file)

    def decode(image, categories):
        return tf.io.decode_jpeg(image, channels=3), tf.io.decode_jpeg(categories, channels=1)

    def to_types(image, categories):
        return tf.cast(image, tf.float32), tf.cast(categories, tf.uint8)

    def one_hot(image, categories):
        return image, tf.one_hot(categories[..., 0], SEED_CATEGORIES)

    files = tf.data.Dataset.list_files(str(prepared / "train" / "images" / "*" / "*.png"))
    pairs = files.map(read_pair).shard(num_workers, worker)  # Distributed: the seed's shard, after every read
    for step in (decode, to_types, one_hot):
        pairs = pairs.map(step, num_parallel_calls=calls)
    return pairs.repeat().shuffle(buffer_size=SEED_SHUFFLE_BUFFER).batch(batch).prefetch(AUTOTUNE)


def write_tfrecords(prepared: pathlib.Path, example_ids, out: pathlib.Path, shards: int = 4):
    """Two TFRecord variants of the prepared train split: PNG bytes, and raw decoded pixels."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: [out / f"{kind}-{s:02d}.tfrecord" for s in range(shards)] for kind in ("png", "raw")}
    if all(path.exists() for group in paths.values() for path in group):
        return paths

    def feature(value: bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    writers = {kind: [tf.io.TFRecordWriter(str(path) + ".tmp") for path in group] for kind, group in paths.items()}
    for n, example_id in enumerate(example_ids):
        image = layout.prepared_image(prepared, "train", example_id).read_bytes()
        categories = layout.prepared_labels(prepared, "train", example_id).read_bytes()
        encoded = {"png": (image, categories),
                   "raw": (tf.io.decode_png(image, 3).numpy().tobytes(),
                           tf.io.decode_png(categories, 1).numpy().tobytes())}
        for kind, (image_bytes, category_bytes) in encoded.items():
            record = tf.train.Example(features=tf.train.Features(
                feature={"image": feature(image_bytes), "categories": feature(category_bytes)}))
            writers[kind][n % shards].write(record.SerializeToString())
    for kind, group in writers.items():
        for writer, path in zip(group, paths[kind], strict=True):
            writer.close()
            replace_durably(str(path) + ".tmp", path)
    return paths


def tfrecord_reader(files, kind: str, height: int, width: int, epochs: int) -> tf.data.Dataset:
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "categories": tf.io.FixedLenFeature([], tf.string)}

    def decode(record):
        parsed = tf.io.parse_single_example(record, spec)
        if kind == "png":
            return tf.io.decode_png(parsed["image"], 3), tf.io.decode_png(parsed["categories"], 1)
        return (tf.reshape(tf.io.decode_raw(parsed["image"], tf.uint8), [height, width, 3]),
                tf.reshape(tf.io.decode_raw(parsed["categories"], tf.uint8), [height, width, 1]))
    records = tf.data.TFRecordDataset([str(f) for f in files], num_parallel_reads=AUTOTUNE).repeat(epochs)
    return records.map(decode, AUTOTUNE).batch(1).prefetch(AUTOTUNE)


# --- One pipeline in a process of its own: epochs and memory --------------------------------------

def run_child(prepared: pathlib.Path, name: str, per_replica_batch: int, epochs: int) -> dict:
    """Epoch by epoch, one iterator (the seed's stream repeats; ours runs for every epoch's steps):
    images/s, CPU ms per image, seconds to the first batch; the first epoch includes building the
    pipeline. Then the process's peak resident memory."""
    kind, workers = name.split("_")[0], 1 if name.endswith("_1") else 2
    global_batch = 2 * per_replica_batch
    batch = global_batch // workers  # what one worker's pipeline yields per step
    pairs = len(json.loads(layout.index_path(prepared, "train").read_text())["examples"])
    steps = pairs // global_batch
    start = memory_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    if kind == "seed":
        dataset = seed_loader(prepared, batch, workers, 0)
    else:
        dataset = data.make_train_dataset(prepared, InputShard(workers, 0, batch, global_batch), epochs * steps, SEED)
    iterator, results = iter(dataset), []
    for _ in range(epochs):
        first = None
        for _ in range(steps):
            next(iterator)
            first = first if first is not None else time.perf_counter() - wall
        now, now_cpu = time.perf_counter(), time.process_time()
        images = steps * batch
        results.append({"images": images, "seconds": round(now - wall, 3),
                        "images_per_sec": round(images / (now - wall), 2),
                        "cpu_ms_per_image": round(1000 * (now_cpu - cpu) / images, 1),
                        "first_batch_s": round(first, 3)})
        wall, cpu = now, now_cpu
    return {"epochs": results, "memory": memory_since(start)}


def child_process(prepared: pathlib.Path, name: str, per_replica_batch: int, epochs: int) -> dict:
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", name, "--data-dir", str(prepared),
               "--batch", str(per_replica_batch), "--epochs", str(epochs)]
    process = subprocess.run(command, capture_output=True, text=True, env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "2"})
    if process.returncode != 0:
        raise SystemExit(f"benchmark_input: the {name} pipeline failed:\n{process.stderr[-3000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def seed_memory_needed(height: int, width: int) -> int:
    """Bytes the seed's shuffle buffer holds: float32 image and 8 float32 one-hot channels per example."""
    return SEED_SHUFFLE_BUFFER * height * width * (3 + SEED_CATEGORIES) * 4


# --- The run ---------------------------------------------------------------------------------------

def prepare_inputs(work: pathlib.Path, pairs: int, size) -> pathlib.Path:
    source, prepared = work / "source", work / "prepared"
    if not (source / layout.IMAGE_DIR).is_dir():
        print(f"writing {pairs} fixture pairs of {size[0]}x{size[1]} to {source} ...", flush=True)
        make_fixture.make_fixture(source, train=pairs, val=0, size=size, seed=SEED)
    problems = prepare_data.prepare(source, prepared, splits=("train",), log=lambda line: print(line, flush=True))
    if problems:
        raise SystemExit("benchmark_input: preparing the fixture failed:\n  " + "\n  ".join(problems))
    return prepared


def run(prepared: pathlib.Path, work: pathlib.Path, per_replica_batch: int, epochs: int, rounds: int,
        seed_loader_runs: bool = True) -> dict:
    index = data.read_index(prepared, "train")
    example_ids, (height, width) = index["examples"], (index["height"], index["width"])
    pairs = len(example_ids)
    global_batch = 2 * per_replica_batch  # two workers, one replica each
    if pairs < 2 * global_batch:
        raise SystemExit(f"benchmark_input: {prepared} has {pairs} training pairs; use at least "
                         f"{2 * global_batch} (each worker needs two batches) or a smaller --batch")
    total_steps = epochs * (pairs // global_batch)
    # Kept per prepared dataset, so that a work dir shared by several --data-dir never mixes them up.
    key = hashlib.sha256(str(prepared.resolve()).encode()).hexdigest()[:10]
    records = write_tfrecords(prepared, example_ids, work / f"tfrecord-{key}")
    variants = in_process_variants(prepared, example_ids, records, per_replica_batch, total_steps, epochs)
    children = CHILDREN
    if seed_loader_runs and seed_memory_needed(height, width) > 0.7 * scene_cache.available_memory_bytes():
        print(f"the seed's shuffle buffer would hold {seed_memory_needed(height, width) / 2**30:.1f} GiB, more than "
              "70% of the available memory: its loader is not run", flush=True)
        seed_loader_runs = False
    if not seed_loader_runs:
        children = tuple(name for name in CHILDREN if not name.startswith("seed"))
    print(f"warm-up pass, then {rounds} rounds of {len(variants)} variants, "
          f"{total_steps * global_batch} examples each, and {len(children)} pipelines in processes of their own ...",
          flush=True)
    runs, child_runs = measure_rounds(variants, children, prepared, per_replica_batch, epochs, rounds)
    config = {"pairs": pairs, "size": [height, width], "per_replica_batch": per_replica_batch,
              "global_batch": global_batch, "steps": total_steps, "epochs": epochs, "rounds": rounds}
    return summarise(prepared, example_ids, records, runs, child_runs, config)


def in_process_variants(prepared: pathlib.Path, example_ids, records: dict, per_replica_batch: int,
                        total_steps: int, epochs: int) -> dict:
    """The pipelines timed in this process, by name: each a function that builds its dataset."""
    index = data.read_index(prepared, "train")
    height, width = index["height"], index["width"]
    global_batch = 2 * per_replica_batch
    single = InputShard(1, 0, global_batch, global_batch)
    workers = [InputShard(2, w, per_replica_batch, global_batch) for w in range(2)]
    order = sharded_order(len(example_ids), single, total_steps, SEED)
    prepared_files = ([str(layout.prepared_image(prepared, "train", example_ids[i])) for i in order],
                      [str(layout.prepared_labels(prepared, "train", example_ids[i])) for i in order])

    def ours(shard, **kwargs):
        return data.make_train_dataset(prepared, shard, total_steps, SEED, **kwargs)
    return {
        "raw_decode_image_and_categories": lambda: raw_decode(prepared_files, with_labels=True),
        "raw_decode_image_only": lambda: raw_decode(prepared_files, with_labels=False),
        "ours_1_pipeline": lambda: ours(single),
        "early_worker_0": lambda: ours(workers[0]),
        "early_worker_1": lambda: ours(workers[1]),
        "late_worker_0": lambda: ours(workers[0], shard_late=True),
        "late_worker_1": lambda: ours(workers[1], shard_late=True),
        "format_tfrecord_png": lambda: tfrecord_reader(records["png"], "png", height, width, epochs),
        "format_tfrecord_raw": lambda: tfrecord_reader(records["raw"], "raw", height, width, epochs),
    }


def measure_rounds(variants: dict, children: tuple, prepared: pathlib.Path, per_replica_batch: int, epochs: int,
                   rounds: int) -> tuple[dict, dict]:
    """A warm-up pass of every variant, then `rounds` rounds of each variant here and each of `children`
    in a process of its own: every round's figures, by name."""
    for make in variants.values():
        measure(make().take(2))
    runs = {name: [] for name in variants}
    child_runs = {name: [] for name in children}
    for round_number in range(rounds):
        for name, make in variants.items():
            runs[name].append(measure(make()))
        for name in (children if round_number % 2 == 0 else children[::-1]):  # none always goes first
            child_runs[name].append(child_process(prepared, name, per_replica_batch, epochs))
        print(f"round {round_number + 1}/{rounds} done: " + "  ".join(
            f"{name} " + "/".join(f"{e['images_per_sec']:.1f}" for e in values[-1]["epochs"])
            for name, values in child_runs.items()) + " img/s by epoch", flush=True)
    return runs, child_runs


def summarise(prepared: pathlib.Path, example_ids, records: dict, runs: dict, child_runs: dict, config: dict) -> dict:
    """The benchmark's report: medians over the rounds, the two-worker jobs, bytes per example, ratios."""
    pairs = len(example_ids)
    counts = {name: values[0]["count"] for name, values in runs.items()}
    median = {name: statistics.median(run["images_per_sec"] for run in values) for name, values in runs.items()}
    cpu = {name: statistics.median(run["cpu_ms_per_image"] for run in values) for name, values in runs.items()}

    # A worker's time is its examples over its rate; the 2-worker job lasts as long as the slower one.
    def job(kind):
        names = [f"{kind}_worker_{w}" for w in range(2)]
        seconds = max(counts[name] / median[name] for name in names)
        examples = sum(counts[name] for name in names)
        cpu_seconds = sum(counts[name] * cpu[name] / 1000 for name in names)
        return {"seconds": seconds, "images_per_sec": examples / seconds, "cpu_seconds": cpu_seconds,
                "cpu_ms_per_image": 1000 * cpu_seconds / examples}
    early, late = job("early"), job("late")
    bytes_per_example = {
        "png_files": sum(layout.prepared_image(prepared, "train", i).stat().st_size
                         + layout.prepared_labels(prepared, "train", i).stat().st_size
                         for i in example_ids) / pairs,
        "tfrecord_png": sum(path.stat().st_size for path in records["png"]) / pairs,
        "tfrecord_raw": sum(path.stat().st_size for path in records["raw"]) / pairs,
    }
    seed_vs_ours = {}
    if "seed_1" in child_runs:
        seed_vs_ours = {"1_worker": ratios_within_rounds(child_runs["ours_1"], child_runs["seed_1"]),
                        "worker_0_of_2": ratios_within_rounds(child_runs["ours_w0"], child_runs["seed_w0"])}
    raw = median["raw_decode_image_and_categories"]
    return {
        "date": datetime.date.today().isoformat(),
        "command": sys.argv,
        "data_dir": str(prepared),
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                    "python": platform.python_version(), "tensorflow": tf.__version__},
        "config": config,
        "variants": {name: {"images_per_sec": median[name], "cpu_ms_per_image": cpu[name],
                            "examples": counts[name], "rounds": values} for name, values in runs.items()},
        "two_workers": {"early": early, "late": late},
        "bytes_per_example": bytes_per_example,
        "epochs_and_memory": {name: summarise_epochs(values) | {"rounds": values}
                              for name, values in child_runs.items()},
        "ratios": {
            "ours_vs_raw_decode": median["ours_1_pipeline"] / raw,
            "ours_vs_raw_decode_by_cpu": cpu["raw_decode_image_and_categories"] / cpu["ours_1_pipeline"],
            "late_vs_early_job_time": late["seconds"] / early["seconds"],
            "late_vs_early_cpu": late["cpu_seconds"] / early["cpu_seconds"],
            "tfrecord_png_vs_png_files": median["format_tfrecord_png"] / raw,
            "tfrecord_raw_vs_png_files": median["format_tfrecord_raw"] / raw,
            "ours_vs_seed_loader": seed_vs_ours,
        },
    }


def table(result: dict) -> str:
    variants, ratios, jobs = result["variants"], result["ratios"], result["two_workers"]
    config, machine, sizes = result["config"], result["machine"], result["bytes_per_example"]

    def row(label, name, note=""):
        return label, variants[name]["images_per_sec"], variants[name]["cpu_ms_per_image"], note
    rows = [
        row("raw decode: read + decode_png, image + categories", "raw_decode_image_and_categories"),
        row("raw decode: image only", "raw_decode_image_only"),
        row("ours: make_train_dataset, 1 pipeline", "ours_1_pipeline",
            f"{ratios['ours_vs_raw_decode']:.2f} x raw decode (goal >= 0.8); "
            f"{ratios['ours_vs_raw_decode_by_cpu']:.2f} by CPU"),
        ("2 workers, early sharding: job", jobs["early"]["images_per_sec"], jobs["early"]["cpu_ms_per_image"],
         f"{jobs['early']['seconds']:.2f} s, the slower worker"),
        ("2 workers, late sharding: job", jobs["late"]["images_per_sec"], jobs["late"]["cpu_ms_per_image"],
         f"{jobs['late']['seconds']:.2f} s = {ratios['late_vs_early_job_time']:.2f} x early "
         f"({ratios['late_vs_early_cpu']:.2f} x the CPU)"),
        row("format: PNG files (= raw decode above)", "raw_decode_image_and_categories",
            f"{sizes['png_files'] / 1e6:.2f} MB/example"),
        row("format: TFRecord of the same PNG bytes", "format_tfrecord_png",
            f"{ratios['tfrecord_png_vs_png_files']:.2f} x PNG files, {sizes['tfrecord_png'] / 1e6:.2f} MB/example"),
        row("format: TFRecord of raw uint8 pixels", "format_tfrecord_raw",
            f"{ratios['tfrecord_raw_vs_png_files']:.2f} x PNG files, {sizes['tfrecord_raw'] / 1e6:.2f} MB/example"),
    ]
    width = max(len(line[0]) for line in rows)
    lines = [f"{result['date']}, {machine['cpus']} CPUs ({machine['processor']}), TF {machine['tensorflow']}; "
             f"{config['pairs']} pairs of {config['size'][0]}x{config['size'][1]}, global batch "
             f"{config['global_batch']}, {config['steps']} steps, median of {config['rounds']} rounds",
             f"{'variant':<{width}}  images/s  CPU ms/image  note", "-" * (width + 60)]
    lines += [f"{label:<{width}}  {rate:8.1f}  {cpu_ms:12.1f}  {note}" for label, rate, cpu_ms, note in rows]
    children = result["epochs_and_memory"]
    if children:
        names = {"seed_1": "seed loader, 1 worker", "ours_1": "ours, 1 worker",
                 "seed_w0": "seed loader, worker 0 of 2", "ours_w0": "ours, worker 0 of 2"}
        lines += ["", f"Epoch by epoch, each pipeline in its own process ({config['epochs']} epochs of "
                  f"{config['pairs']} pairs; the first includes building the pipeline):",
                  f"{'pipeline':<28}{'1st epoch img/s':>16}{'CPU ms/img':>12}{'1st batch s':>13}"
                  f"{'later img/s':>13}{'CPU ms/img':>12}{'peak RSS MB':>13}"]
        for name, summary in children.items():
            first = summary["first_epoch"]
            later = summary["later_epochs"] or {"images_per_sec": 0, "cpu_ms_per_image": 0}
            lines.append(f"{names[name]:<28}{first['images_per_sec']:>16.1f}{first['cpu_ms_per_image']:>12.1f}"
                         f"{first['first_batch_s']:>13.2f}{later['images_per_sec']:>13.1f}"
                         f"{later['cpu_ms_per_image']:>12.1f}"
                         f"{summary['memory']['peak_rss_mb']:>13,.0f}")
        for key, label in (("1_worker", "1 worker"), ("worker_0_of_2", "worker 0 of 2")):
            ratio = ratios["ours_vs_seed_loader"].get(key)
            if ratio:
                later = (f", later epochs {ratio['later_epochs']['median']:.2f}x "
                         f"(lowest {ratio['later_epochs']['min']:.2f}x)" if "later_epochs" in ratio else "")
                lines.append(f"ours / seed loader, {label}, within each round: first epoch "
                             f"{ratio['first_epoch']['median']:.2f}x "
                             f"(lowest {ratio['first_epoch']['min']:.2f}x){later}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None,
                        help="an existing prepared dataset (prepare_data.py --out); default: generate --pairs "
                             "fixture pairs under --work-dir")
    parser.add_argument("--work-dir", default=None,
                        help="the generated fixture and the TFRecord copies are kept here and reused "
                             "(default: a temporary folder)")
    parser.add_argument("--pairs", type=int, default=24, help="fixture pairs (default 24; ignored with --data-dir)")
    parser.add_argument("--size", default="1024x2048", help="HEIGHTxWIDTH of the fixture (default 1024x2048)")
    parser.add_argument("--batch", type=int, default=2, help="per-replica batch (default 2; global = 2 x this)")
    parser.add_argument("--epochs", type=int, default=4, help="passes over the pairs per timed run (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are reported (default 5)")
    parser.add_argument("--no-seed-loader", action="store_true",
                        help="leave out the seed's loader (its shuffle buffer holds 128 float32 examples)")
    parser.add_argument("--json", default=None, help="also write the result to this file")
    parser.add_argument("--child", choices=CHILDREN, help=argparse.SUPPRESS)  # one pipeline, JSON to stdout
    args = parser.parse_args(argv)
    if min(args.batch, args.epochs, args.rounds) < 1:
        parser.error("--batch, --epochs and --rounds must be at least 1")
    if args.child:
        print(json.dumps(run_child(pathlib.Path(args.data_dir), args.child, args.batch, args.epochs)))
        return 0
    try:
        size = layout.parse_size(args.size)
    except ValueError as error:
        parser.error(f"--size: {error}")
    user_paths.exit_if((args.data_dir and user_paths.folder_problem("--data-dir", args.data_dir))
                       or user_paths.flags_problem({"--data-dir": args.data_dir}, {"--work-dir": args.work_dir},
                                                   {"--json": args.json}))
    if not args.data_dir and args.pairs < 4 * args.batch:
        parser.error(f"--pairs {args.pairs}: use at least {4 * args.batch} so each worker gets two batches")
    with tempfile.TemporaryDirectory(prefix="cityscapes-bench-") as temporary:
        work = pathlib.Path(args.work_dir or temporary)
        try:
            prepared = pathlib.Path(args.data_dir) if args.data_dir else prepare_inputs(work, args.pairs, size)
            result = run(prepared, work, args.batch, args.epochs, args.rounds, not args.no_seed_loader)
        except data.DataError as error:
            raise SystemExit(f"error: {error}") from None
    return write_report(result, args.json, table)


def write_report(result: dict, json_path, render) -> int:
    """Print the result as JSON and as its table (`render`), and keep the JSON at `json_path` if given."""
    text = json.dumps(result, indent=1)
    if json_path:
        pathlib.Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(json_path).write_text(text + "\n")
    print(text)
    print()
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
