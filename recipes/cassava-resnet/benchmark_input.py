"""Benchmark the cassava input pipeline against the seed tutorial's, and both against the training step.

    python recipes/cassava-resnet/benchmark_input.py --json results/cassava-resnet/input-benchmark.json

On generated photos of the real ones' sizes (500x375 to 800x600 JPEGs, written once as a prepared
TFDS `cassava` directory under --work-dir), it measures in one run:

  - the seed's pipeline: tfds.load, then resize and /255 one image at a time, shuffle(1000),
    batch(32), prefetch; one epoch from a fresh iterator, as Keras `fit` starts every epoch;
  - the seed's serial stage alone: its resize + /255 map on photos already decoded into memory.
    TFDS decodes in parallel, but this map runs on one thread, so its rate is the ceiling of the
    seed's pipeline however many cores the machine has;
  - ours, the one-time cache build: decode + resize every photo once, in parallel, into the cache;
  - ours, an epoch after that: per-replica batches gathered from the cache by sharded index;
  - the training step alone: this recipe's ResNet50 (Adam, float32) on one fixed batch of generated
    tensors, through the shared training loop on one device, first steps excluded.

The pipeline measurements are interleaved over --rounds rounds and the median is reported, so both
pipelines share whatever else runs on the machine. Every rate also comes with the CPU time this
process spent per image (all threads), which depends much less on other load than wall time does.
A pipeline is fast enough when its images/s exceeds the training step's images/s with the cores
it will actually have; `cpu_ms_per_image` x the step's images/s says how many cores that takes.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", ".."))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import generated_cassava  # noqa: E402
import input_pipeline  # noqa: E402
from common.data import InputShard, steps_per_epoch  # noqa: E402
from common.results import throughput, versions, write_json  # noqa: E402


def timed(work) -> dict:
    """Run `work()`, an iterator of batch sizes: images/s, CPU ms/image, seconds to the first batch."""
    wall, cpu = time.perf_counter(), time.process_time()
    images, first = 0, None
    for count in work():
        images += count
        first = first if first is not None else time.perf_counter() - wall
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"images": images, "seconds": round(wall, 3), "images_per_s": round(images / wall, 1),
            "cpu_ms_per_image": round(1e3 * cpu / images, 2), "first_batch_s": round(first, 3)}


def epoch_of(make_dataset):
    """One epoch from a fresh iterator, start-up included (Keras fit restarts the pipeline every epoch)."""
    def work():
        return (int(labels.shape[0]) for _, labels in make_dataset())
    return work


def prepare_photos(work_dir: str, count: int) -> str:
    data_dir = os.path.join(work_dir, f"cassava-{count}-photos")
    if not os.path.isfile(os.path.join(data_dir, "cassava", "0.1.0", "dataset_info.json")):
        print(f"writing {count} generated photos (500x375 to 800x600 JPEG) as TFDS cassava in {data_dir}",
              flush=True)
        shutil.rmtree(data_dir, ignore_errors=True)
        generated_cassava.write_prepared_cassava(data_dir, train=count, validation=0, test=0)
    return data_dir


def photo_stats(builder) -> dict:
    sizes, shapes = [], []
    for jpeg, _ in input_pipeline.encoded_split(builder, "train").take(200).as_numpy_iterator():
        sizes.append(len(jpeg))
        shapes.append(tuple(int(d) for d in tf.io.extract_jpeg_shape(jpeg).numpy()[:2]))
    return {"mean_jpeg_kb": round(float(np.mean(sizes)) / 1024, 1),
            "shapes_hxw": sorted({f"{h}x{w}" for h, w in shapes})}


def seed_decoded_in_memory(data_dir: str) -> tf.data.Dataset:
    """The photos as TFDS decodes them, held in memory, so that the seed's one-image-at-a-time
    resize + /255 map can be timed alone: the part of its pipeline that more cores do not speed up."""
    import tensorflow_datasets as tfds

    decoded = tfds.load("cassava", split="train", as_supervised=True, data_dir=data_dir,
                        read_config=tfds.ReadConfig(try_autocache=False)).cache()
    for _ in decoded:  # fill the cache; decoding is not part of what is timed
        pass
    return decoded


def ours(builder, image_size: int, shard: InputShard, steps: int, seed: int) -> tuple[dict, dict]:
    """Our pipeline in a fresh cache folder: the one-time build, then one epoch from the cache."""
    cache_dir = tempfile.mkdtemp(prefix="cassava-cache-")
    arrays = []

    def build():
        arrays.append(input_pipeline.cache_split(builder, "train", image_size, cache_dir, shard,
                                                 log=lambda message: None))
        yield len(arrays[0])

    try:
        built = timed(build)
        epoch = timed(epoch_of(lambda: input_pipeline.make_train_dataset(arrays[0], shard, steps, seed)))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return built, epoch


def benchmark_pipelines(data_dir: str, image_size: int, batch: int, rounds: int, seed: int) -> dict:
    builder = input_pipeline.cassava_builder(data_dir, allow_download=False)
    total = builder.info.splits["train"].num_examples
    shard = InputShard(num_pipelines=1, pipeline_id=0, per_replica_batch=batch, global_batch=batch)
    steps = steps_per_epoch(total, batch)
    runs = {"seed": [], "seed_serial_stage": [], "ours_cache_build": [], "ours_epoch": []}
    decoded = seed_decoded_in_memory(data_dir)

    def serial_stage():
        return decoded.map(lambda image, label: (tf.image.resize(image, (image_size, image_size)) / 255.0,
                                                 label)).batch(batch)

    for round_index in range(rounds):
        runs["seed"].append(timed(epoch_of(
            lambda: input_pipeline.seed_train_dataset(data_dir, batch, image_size, seed=seed))))
        runs["seed_serial_stage"].append(timed(epoch_of(serial_stage)))
        build, epoch = ours(builder, image_size, shard, steps, seed + round_index)
        runs["ours_cache_build"].append(build)
        runs["ours_epoch"].append(epoch)
        print(f"round {round_index + 1}/{rounds}: " + "  ".join(
            f"{name} {values[-1]['images_per_s']:,.0f} img/s" for name, values in runs.items()), flush=True)

    summary = {name: {key: statistics.median(run[key] for run in values)
                      for key in ("images_per_s", "cpu_ms_per_image", "seconds", "first_batch_s")}
               | {"images": values[0]["images"]}
               for name, values in runs.items()}
    summary["ratio_ours_epoch_to_seed"] = round(statistics.median(
        o["images_per_s"] / s["images_per_s"] for o, s in zip(runs["ours_epoch"], runs["seed"])), 2)
    summary["ratio_ours_cache_build_to_seed"] = round(statistics.median(
        o["images_per_s"] / s["images_per_s"] for o, s in zip(runs["ours_cache_build"], runs["seed"])), 2)
    summary["rounds"] = runs
    summary["photos"] = photo_stats(builder) | {"count": total}
    return summary


def benchmark_training_step(image_size: int, batch: int, warmup: int, steps: int, seed: int) -> dict:
    """The training step alone: this recipe's model and optimizer in the shared loop, one device,
    one fixed batch of generated uint8 images (no input pipeline cost at all)."""
    import keras

    import train
    from common import training
    from common.launchers import create_launcher

    launcher = create_launcher("single")
    keras.utils.set_random_seed(seed)
    training.configure_precision(False)
    rng = np.random.default_rng(seed)
    images = tf.constant(rng.integers(0, 256, (batch, image_size, image_size, 3), dtype=np.uint8))
    labels = tf.constant(rng.integers(0, input_pipeline.NUM_CLASSES, batch).astype(np.int32))
    results_dir = tempfile.mkdtemp(prefix="cassava-step-")
    try:
        trainer = training.Trainer(launcher, "cassava-resnet", num_examples=batch * (warmup + steps),
                                   per_replica_batch=batch, max_steps=warmup + steps, results_dir=results_dir,
                                   log_every=warmup + steps, warmup_steps=warmup)
        with launcher.scope():
            model = train.build_model(image_size, None)
            optimizer = keras.optimizers.Adam(1e-4)
        trainer.setup(model, optimizer)
        dataset = launcher.distribute_dataset(
            lambda shard: tf.data.Dataset.from_tensors((images, labels)).repeat(), batch)
        cpu = time.process_time()
        trainer.fit(dataset, train.TASK)
        cpu = time.process_time() - cpu
    finally:
        shutil.rmtree(results_dir, ignore_errors=True)
    measured = throughput(trainer.step_times, batch, 1, warmup)
    return {"batch": batch, "warmup_steps": warmup, **measured,
            "step_times_s": [round(t, 2) for t in trainer.step_times],
            "cpu_ms_per_image_all_steps": round(1e3 * cpu / (batch * (warmup + steps)), 1)}


def table(report: dict) -> str:
    pipes, step = report["pipelines"], report.get("training_step")
    size = report["image_size"]
    rows = [("seed: tfds.load, resize + /255 per image, every epoch", pipes["seed"]),
            ("seed, its serial stage alone (resize + /255, 1 thread)", pipes["seed_serial_stage"]),
            ("ours: one-time cache build (decode + resize, parallel)", pipes["ours_cache_build"]),
            ("ours: epoch from the cache (gather by sharded index)", pipes["ours_epoch"])]
    lines = [f"Input pipelines, {pipes['photos']['count']} generated photos -> {size}x{size}, batch {report['batch']}, "
             f"median of {report['rounds']} interleaved rounds, {report['machine']['cpus']} CPU cores:",
             f"  {'pipeline':<58}{'img/s':>10}{'CPU ms/img':>12}{'1st batch s':>13}",
             *[f"  {name:<58}{run['images_per_s']:>10,.0f}{run['cpu_ms_per_image']:>12.2f}{run['first_batch_s']:>13.2f}"
               for name, run in rows],
             f"  ours (epoch from the cache) / seed:   {pipes['ratio_ours_epoch_to_seed']:.1f}x",
             f"  ours (one-time cache build) / seed:   {pipes['ratio_ours_cache_build_to_seed']:.1f}x"]
    if step is None:
        return "\n".join(lines)
    lines += ["",
              f"Training step alone (ResNet50 {size}x{size}, batch {step['batch']}, float32, 1 device, "
              f"{step['timed_steps']} steps after {step['warmup_steps']} warm-up):",
              f"  {step['images_per_sec']:,.1f} img/s  (step p50 {step['step_time_p50_ms'] / 1e3:.2f} s)",
              f"  seed pipeline / training step:        {report['ratio_pipeline_to_step']['seed']:,.0f}x",
              f"  ours (epoch) / training step:         {report['ratio_pipeline_to_step']['ours_epoch']:,.0f}x"]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photos", type=int, default=1024, help="generated training photos")
    parser.add_argument("--image-size", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--step-warmup", type=int, default=2, help="training steps left out (tracing)")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps")
    parser.add_argument("--skip-step", action="store_true", help="measure the input pipelines only")
    parser.add_argument("--work-dir", default="build/cassava-benchmark", help="generated photos are kept here")
    parser.add_argument("--json", default=None, help="also write the report here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    data_dir = prepare_photos(args.work_dir, args.photos)
    report = {
        "benchmark": "cassava-resnet input pipeline", "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": sys.argv, "image_size": args.image_size, "batch": args.batch_size, "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor()},
        "versions": versions(),
        "pipelines": benchmark_pipelines(data_dir, args.image_size, args.batch_size, args.rounds, args.seed),
    }
    if not args.skip_step:
        report["training_step"] = benchmark_training_step(args.image_size, args.batch_size, args.step_warmup,
                                                          args.steps, args.seed)
        step = report["training_step"]["images_per_sec"]
        report["ratio_pipeline_to_step"] = {name: round(report["pipelines"][name]["images_per_s"] / step, 1)
                                            for name in ("seed", "seed_serial_stage", "ours_cache_build",
                                                         "ours_epoch")}
    print(table(report))
    if args.json:
        write_json(args.json, report)
        print(f"report: {args.json}")


if __name__ == "__main__":
    main()
