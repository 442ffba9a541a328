"""Benchmark the Cityscapes input pipeline against the decode limit, late sharding and the seed's loader.

    python recipes/cityscapes-unet/benchmark_input.py --json results/input-benchmark.json

Generates full-size (1024x2048) fixture pairs, prepares them, and times in one run, interleaved
over several rounds (median reported, so the numbers share the machine's load):
  - raw decode: read + tf.io.decode_png of the same files, parallel, nothing else: the ceiling;
  - our training pipeline (data.make_train_dataset, full resolution, random flip);
  - 2 workers, early vs late sharding: each worker's pipeline timed alone, as if on its own
    machine; the job takes as long as its slower worker;
  - the seed's loader: reads the original image and labelIds files, decodes them with
    tf.io.decode_jpeg (TF's decoders sniff the format, so this decodes PNG too), maps ids to
    categories, one-hots 8 channels, one example at a time;
  - storage formats: the prepared PNG files vs TFRecord shards of the same PNG bytes vs TFRecord
    shards of raw uint8 pixels.
The first element of every run is excluded (start-up and tracing); all files are read from the
page cache after a warm-up pass.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # common.data, when run as a script

import tensorflow as tf  # noqa: E402

import data  # noqa: E402
import labels  # noqa: E402
import layout  # noqa: E402
import make_fixture  # noqa: E402
import prepare_data  # noqa: E402
from common.data import InputShard, sharded_order  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE
SEED = 0


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
    return {"images_per_s": count / (time.perf_counter() - wall),
            "cpu_ms_per_image": 1000 * (time.process_time() - cpu) / count, "count": count}


# --- The variants --------------------------------------------------------------------------------

def raw_decode(files, with_labels: bool) -> tf.data.Dataset:
    def decode(image_file, category_file):
        image = tf.io.decode_png(tf.io.read_file(image_file), channels=3)
        if not with_labels:
            return image
        return image, tf.io.decode_png(tf.io.read_file(category_file), channels=1)
    return tf.data.Dataset.from_tensor_slices(files).map(decode, AUTOTUNE).batch(1).prefetch(AUTOTUNE)


def seed_loader(source: pathlib.Path, example_ids, batch: int) -> tf.data.Dataset:
    images = [str(source / layout.image_member("train", i)) for i in example_ids]
    label_files = [str(source / layout.label_member("train", i)) for i in example_ids]
    lookup = tf.constant(labels.CATEGORY_LOOKUP)

    def load(image_file, label_file):
        image = tf.cast(tf.io.decode_jpeg(tf.io.read_file(image_file), channels=3), tf.float32) / 255.0
        label_ids = tf.io.decode_jpeg(tf.io.read_file(label_file), channels=1)[..., 0]
        return image, tf.one_hot(tf.gather(lookup, tf.cast(label_ids, tf.int32)), labels.NUM_CATEGORIES)
    return tf.data.Dataset.from_tensor_slices((images, label_files)).map(load).batch(batch)


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
        categories = layout.prepared_categories(prepared, "train", example_id).read_bytes()
        encoded = {"png": (image, categories),
                   "raw": (tf.io.decode_png(image, 3).numpy().tobytes(),
                           tf.io.decode_png(categories, 1).numpy().tobytes())}
        for kind, (image_bytes, category_bytes) in encoded.items():
            record = tf.train.Example(features=tf.train.Features(
                feature={"image": feature(image_bytes), "categories": feature(category_bytes)}))
            writers[kind][n % shards].write(record.SerializeToString())
    for kind, group in writers.items():
        for writer, path in zip(group, paths[kind]):
            writer.close()
            os.replace(str(path) + ".tmp", path)
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


# --- The run ---------------------------------------------------------------------------------------

def prepare_inputs(work: pathlib.Path, pairs: int, size) -> tuple[pathlib.Path, pathlib.Path]:
    source, prepared = work / "source", work / "prepared"
    if not (source / layout.IMAGE_DIR).is_dir():
        print(f"writing {pairs} fixture pairs of {size[0]}x{size[1]} to {source} ...", flush=True)
        make_fixture.make_fixture(source, train=pairs, val=0, size=size, seed=SEED)
    problems = prepare_data.prepare(source, prepared, splits=("train",), log=lambda line: print(line, flush=True))
    if problems:
        raise SystemExit("benchmark_input: preparing the fixture failed:\n  " + "\n  ".join(problems))
    return source, prepared


def run(work: pathlib.Path, pairs: int, size, per_replica_batch: int, epochs: int, rounds: int) -> dict:
    source, prepared = prepare_inputs(work, pairs, size)
    index = data.read_index(prepared, "train")
    example_ids, (height, width) = index["examples"], (index["height"], index["width"])
    if len(example_ids) != pairs or (height, width) != tuple(size):
        raise SystemExit(f"benchmark_input: {work} holds {len(example_ids)} pairs of {height}x{width}, "
                         f"not {pairs} of {size[0]}x{size[1]}; use another --data-dir")
    global_batch = 2 * per_replica_batch  # two workers, one replica each
    total_steps = epochs * (pairs // global_batch)
    single = InputShard(1, 0, global_batch, global_batch)
    workers = [InputShard(2, w, per_replica_batch, global_batch) for w in range(2)]
    order = sharded_order(pairs, single, total_steps, SEED)
    prepared_files = ([str(layout.prepared_image(prepared, "train", example_ids[i])) for i in order],
                      [str(layout.prepared_categories(prepared, "train", example_ids[i])) for i in order])
    records = write_tfrecords(prepared, example_ids, work / "tfrecord")

    def ours(shard, **kwargs):
        return data.make_train_dataset(prepared, shard, total_steps, SEED, **kwargs)
    variants = {
        "raw_decode_image_and_categories": lambda: raw_decode(prepared_files, with_labels=True),
        "raw_decode_image_only": lambda: raw_decode(prepared_files, with_labels=False),
        "ours_1_pipeline": lambda: ours(single),
        "early_worker_0": lambda: ours(workers[0]),
        "early_worker_1": lambda: ours(workers[1]),
        "late_worker_0": lambda: ours(workers[0], shard_late=True),
        "late_worker_1": lambda: ours(workers[1], shard_late=True),
        "seed_loader": lambda: seed_loader(source, [example_ids[i] for i in order], global_batch),
        "format_tfrecord_png": lambda: tfrecord_reader(records["png"], "png", height, width, epochs),
        "format_tfrecord_raw": lambda: tfrecord_reader(records["raw"], "raw", height, width, epochs),
    }
    print(f"warm-up pass, then {rounds} rounds of {len(variants)} variants, "
          f"{len(order)} examples each ...", flush=True)
    for make in variants.values():
        measure(make().take(2))
    runs = {name: [] for name in variants}
    for round_number in range(rounds):
        for name, make in variants.items():
            runs[name].append(measure(make()))
        print(f"round {round_number + 1}/{rounds} done", flush=True)
    counts = {name: values[0]["count"] for name, values in runs.items()}
    median = {name: statistics.median(run["images_per_s"] for run in values) for name, values in runs.items()}
    cpu = {name: statistics.median(run["cpu_ms_per_image"] for run in values) for name, values in runs.items()}

    # A worker's time is its examples over its rate; the 2-worker job lasts as long as the slower one.
    def job(kind):
        names = [f"{kind}_worker_{w}" for w in range(2)]
        seconds = max(counts[name] / median[name] for name in names)
        examples = sum(counts[name] for name in names)
        cpu_seconds = sum(counts[name] * cpu[name] / 1000 for name in names)
        return {"seconds": seconds, "images_per_s": examples / seconds, "cpu_seconds": cpu_seconds,
                "cpu_ms_per_image": 1000 * cpu_seconds / examples}
    early, late = job("early"), job("late")
    bytes_per_example = {
        "png_files": sum(layout.prepared_image(prepared, "train", i).stat().st_size
                         + layout.prepared_categories(prepared, "train", i).stat().st_size
                         for i in example_ids) / pairs,
        "tfrecord_png": sum(path.stat().st_size for path in records["png"]) / pairs,
        "tfrecord_raw": sum(path.stat().st_size for path in records["raw"]) / pairs,
    }
    return {
        "date": datetime.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                    "python": platform.python_version(), "tensorflow": tf.__version__},
        "config": {"pairs": pairs, "size": list(size), "per_replica_batch": per_replica_batch,
                   "global_batch": global_batch, "steps": total_steps, "rounds": rounds},
        "variants": {name: {"images_per_s": median[name], "cpu_ms_per_image": cpu[name],
                            "examples": counts[name], "rounds": runs[name]} for name in variants},
        "two_workers": {"early": early, "late": late},
        "bytes_per_example": bytes_per_example,
        "ratios": {
            "ours_vs_raw_decode": median["ours_1_pipeline"] / median["raw_decode_image_and_categories"],
            "ours_vs_raw_decode_by_cpu": cpu["raw_decode_image_and_categories"] / cpu["ours_1_pipeline"],
            "late_vs_early_job_time": late["seconds"] / early["seconds"],
            "late_vs_early_cpu": late["cpu_seconds"] / early["cpu_seconds"],
            "ours_vs_seed_loader": median["ours_1_pipeline"] / median["seed_loader"],
            "ours_vs_seed_loader_by_cpu": cpu["seed_loader"] / cpu["ours_1_pipeline"],
            "tfrecord_png_vs_png_files": median["format_tfrecord_png"] / median["raw_decode_image_and_categories"],
            "tfrecord_raw_vs_png_files": median["format_tfrecord_raw"] / median["raw_decode_image_and_categories"],
        },
    }


def table(result: dict) -> str:
    variants, ratios, jobs = result["variants"], result["ratios"], result["two_workers"]
    config, machine, sizes = result["config"], result["machine"], result["bytes_per_example"]

    def row(label, name, note=""):
        return label, variants[name]["images_per_s"], variants[name]["cpu_ms_per_image"], note
    rows = [
        row("raw decode: read + decode_png, image + categories", "raw_decode_image_and_categories"),
        row("raw decode: image only", "raw_decode_image_only"),
        row("ours: make_train_dataset, 1 pipeline", "ours_1_pipeline",
            f"{ratios['ours_vs_raw_decode']:.2f} x raw decode (goal >= 0.8); "
            f"{ratios['ours_vs_raw_decode_by_cpu']:.2f} by CPU"),
        row("seed loader: decode_jpeg + one-hot, sequential", "seed_loader",
            f"ours: {ratios['ours_vs_seed_loader']:.2f} x its rate, "
            f"{ratios['ours_vs_seed_loader_by_cpu']:.2f} x less CPU"),
        ("2 workers, early sharding: job", jobs["early"]["images_per_s"], jobs["early"]["cpu_ms_per_image"],
         f"{jobs['early']['seconds']:.2f} s, the slower worker"),
        ("2 workers, late sharding: job", jobs["late"]["images_per_s"], jobs["late"]["cpu_ms_per_image"],
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
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None,
                        help="keep the generated fixture here and reuse it next time (default: a temp dir)")
    parser.add_argument("--pairs", type=int, default=24, help="fixture pairs (default 24)")
    parser.add_argument("--size", default="1024x2048", help="HEIGHTxWIDTH (default 1024x2048)")
    parser.add_argument("--batch", type=int, default=2, help="per-replica batch (default 2; global = 2 x this)")
    parser.add_argument("--epochs", type=int, default=4, help="passes over the pairs per timed run (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are reported (default 5)")
    parser.add_argument("--json", default=None, help="also write the result to this file")
    args = parser.parse_args(argv)
    try:
        size = layout.parse_size(args.size)
    except ValueError as error:
        parser.error(f"--size: {error}")
    if args.pairs < 4 * args.batch:
        parser.error(f"--pairs {args.pairs}: use at least {4 * args.batch} so each worker gets two batches")
    if min(args.batch, args.epochs, args.rounds) < 1:
        parser.error("--batch, --epochs and --rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="cityscapes-bench-") as temporary:
        work = pathlib.Path(args.data_dir or temporary)
        result = run(work, args.pairs, size, args.batch, args.epochs, args.rounds)
    text = json.dumps(result, indent=1)
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(text + "\n")
    print(text)
    print()
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
