"""Benchmark the cassava input pipeline against the seed tutorial's, epoch by epoch, and the training step.

    python recipes/cassava-resnet/benchmark_input.py --json results/cassava-resnet/input-benchmark.json
    python recipes/cassava-resnet/benchmark_input.py --data-dir /shared/tensorflow_datasets --skip-step

On a prepared TFDS `cassava` directory (--data-dir; by default --photos generated photos of the real
ones' sizes, 500x375 to 800x600 JPEGs, written once under --work-dir) it times two pipelines:

  - the seed's, as the seed wrote it (input_pipeline.seed_train_dataset): tfds.load, a map that
    resizes and divides by 255 with num_parallel_calls=AUTOTUNE, .cache() in memory, shuffle(1000),
    batch, prefetch; a fresh iterator per epoch, as Keras `fit` makes one. Its first epoch decodes
    and fills the float32 cache, later epochs read the cache;
  - ours: cache_split (decode + resize once into uint8 files), then make_train_dataset (batches
    gathered from the cache in sharded_order), one iterator over all epochs, as the training loop
    reads it. Its first epoch includes building the cache, in a fresh cache folder.

Each pipeline runs in its own process (so that its memory is its own: peak resident set, VmHWM) and
the two alternate over --rounds rounds; the medians are reported, and every ratio is taken within a
round, where both pipelines shared the machine's load. An epoch's time starts when its iterator is
created; the first epoch's also includes building the pipeline (tfds.load, or the cache).

Optionally (not with --skip-step) the training step alone: this recipe's ResNet50 (Adam, float32) on
one fixed batch of generated tensors, through the shared training loop on one device, first steps
excluded. A pipeline is fast enough when its images/s exceeds the step's with the cores it will
actually have; `cpu_ms_per_image` x the step's images/s says how many cores that takes.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import generated_cassava  # noqa: E402
import input_pipeline  # noqa: E402
from tf_recipes import user_paths  # noqa: E402
from tf_recipes.data import InputShard, steps_per_epoch  # noqa: E402
from tf_recipes.operations.pipeline_bench import memory_mb, memory_since, ratios_within_rounds, summarise_epochs  # noqa: E402
from tf_recipes.reporting import throughput, versions, write_json  # noqa: E402

PIPELINES = ("seed", "ours")


# ## One pipeline, in a process of its own

class EpochClock:
    """Wall time, CPU time (all threads) and time to the first batch of one epoch."""

    def __init__(self):
        self.wall, self.cpu, self.images, self.first = time.perf_counter(), time.process_time(), 0, None

    def batch(self, count: int):
        self.images += count
        if self.first is None:
            self.first = time.perf_counter() - self.wall

    def result(self) -> dict:
        wall, cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu
        return {"images": self.images, "seconds": round(wall, 3), "images_per_sec": round(self.images / wall, 1),
                "cpu_ms_per_image": round(1e3 * cpu / self.images, 3), "first_batch_s": round(self.first, 3)}


def run_seed(data_dir: str, image_size: int, batch: int, epochs: int, seed: int) -> dict:
    clocks, bytes_per_image = [], None
    for epoch in range(epochs):
        clock = EpochClock()
        if epoch == 0:
            dataset = input_pipeline.seed_train_dataset(data_dir, batch, image_size, seed=seed)
        for images, labels in dataset:  # a fresh iterator per epoch, as Keras fit does
            clock.batch(int(labels.shape[0]))
            bytes_per_image = bytes_per_image or images.numpy().nbytes // int(labels.shape[0])
        clocks.append(clock.result())
    return {"epochs": clocks, "bytes_per_image_to_device": bytes_per_image}


def run_ours(data_dir: str, image_size: int, batch: int, epochs: int, seed: int, cache_dir: str) -> dict:
    shard = InputShard(num_pipelines=1, pipeline_id=0, per_replica_batch=batch, global_batch=batch)
    clocks, bytes_per_image = [], None
    clock = EpochClock()
    builder = input_pipeline.cassava_builder(data_dir, allow_download=False)
    arrays = input_pipeline.cache_split(builder, "train", image_size, cache_dir, shard, log=lambda _: None)
    steps = steps_per_epoch(len(arrays), batch)
    # One iterator over every epoch, as the training loop reads it; an epoch ends after `steps` batches.
    iterator = iter(input_pipeline.make_train_dataset(arrays, shard, epochs * steps, seed))
    for _ in range(epochs):
        for _ in range(steps):
            images, labels = next(iterator)
            clock.batch(int(labels.shape[0]))
            bytes_per_image = bytes_per_image or images.numpy().nbytes // int(labels.shape[0])
        clocks.append(clock.result())
        clock = EpochClock()
    return {"epochs": clocks, "bytes_per_image_to_device": bytes_per_image}


def child(args) -> dict:
    start = memory_mb()
    if args.child == "seed":
        result = run_seed(args.data_dir, args.image_size, args.batch_size, args.epochs, args.seed)
    else:
        cache_dir = tempfile.mkdtemp(prefix="cassava-cache-", dir=args.work_dir)
        try:
            result = run_ours(args.data_dir, args.image_size, args.batch_size, args.epochs, args.seed, cache_dir)
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
    result["memory"] = memory_since(start)
    return result


def run_child(name: str, data_dir: str, args) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--child", name, "--data-dir", data_dir,
               "--work-dir", args.work_dir, "--image-size", str(args.image_size),
               "--batch-size", str(args.batch_size), "--epochs", str(args.epochs), "--seed", str(args.seed)]
    process = subprocess.run(command, capture_output=True, text=True,
                             env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "2"})
    if process.returncode != 0:
        raise SystemExit(f"benchmark_input: the {name} pipeline failed:\n{process.stderr[-3000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


# ## The comparison

def benchmark_pipelines(data_dir: str, args) -> dict:
    builder = input_pipeline.cassava_builder(data_dir, allow_download=False)
    runs = {name: [] for name in PIPELINES}
    for round_index in range(args.rounds):
        order = PIPELINES if round_index % 2 == 0 else PIPELINES[::-1]  # neither always goes first
        for name in order:
            runs[name].append(run_child(name, data_dir, args))
        print(f"round {round_index + 1}/{args.rounds}: " + "  ".join(
            f"{name} " + " / ".join(f"{epoch['images_per_sec']:,.0f}" for epoch in runs[name][-1]["epochs"])
            + " img/s" for name in PIPELINES), flush=True)
    summary = {name: summarise_epochs(values) | {"bytes_per_image_to_device": values[0]["bytes_per_image_to_device"]}
               for name, values in runs.items()}
    return {"summary": summary, "ratio_ours_to_seed": ratios_within_rounds(runs["ours"], runs["seed"]),
            "rounds": runs, "photos": photo_stats(builder)}


def photo_stats(builder) -> dict:
    sizes, shapes = [], []
    for jpeg, _ in input_pipeline.encoded_split(builder, "train").take(200).as_numpy_iterator():
        sizes.append(len(jpeg))
        shapes.append(tuple(int(d) for d in tf.io.extract_jpeg_shape(jpeg).numpy()[:2]))
    return {"count": builder.info.splits["train"].num_examples,
            "mean_jpeg_kb": round(float(np.mean(sizes)) / 1024, 1),
            "shapes_hxw": sorted({f"{h}x{w}" for h, w in shapes})}


def prepare_photos(work_dir: str, count: int) -> str:
    data_dir = os.path.join(work_dir, f"cassava-{count}-photos")
    if not os.path.isfile(os.path.join(data_dir, "cassava", "0.1.0", "dataset_info.json")):
        print(f"writing {count} generated photos (500x375 to 800x600 JPEG) as TFDS cassava in {data_dir}",
              flush=True)
        shutil.rmtree(data_dir, ignore_errors=True)
        generated_cassava.write_prepared_cassava(data_dir, train=count, validation=0, test=0)
    return data_dir


def benchmark_training_step(image_size: int, batch: int, warmup: int, steps: int, seed: int) -> dict:
    """The training step alone: this recipe's model and optimizer in the shared loop, one device,
    one fixed batch of generated uint8 images (no input pipeline cost at all)."""
    import keras

    import train
    from tf_recipes import training
    from tf_recipes.config import RunConfig
    from tf_recipes.launchers import create_launcher

    launcher = create_launcher("single")
    keras.utils.set_random_seed(seed)
    training.configure_precision(False)
    rng = np.random.default_rng(seed)
    images = tf.constant(rng.integers(0, 256, (batch, image_size, image_size, 3), dtype=np.uint8))
    labels = tf.constant(rng.integers(0, input_pipeline.NUM_CLASSES, batch).astype(np.int32))
    results_dir = tempfile.mkdtemp(prefix="cassava-step-")
    try:
        config = RunConfig(batch_size=batch, max_steps=warmup + steps, results_dir=results_dir,
                           log_every=warmup + steps, warmup_steps=warmup, steps_per_loop=1)
        with launcher.scope():
            model = train.build_model(image_size, None)
            optimizer = keras.optimizers.Adam(1e-4)
        trainer = training.Trainer(launcher, "cassava-resnet", config, config.plan(batch * (warmup + steps), 1),
                                   model=model, optimizer=optimizer, task=train.TASK)
        dataset = launcher.distribute_dataset(
            lambda shard: tf.data.Dataset.from_tensors((images, labels)).repeat(), batch)
        cpu = time.process_time()
        trainer.fit(dataset)
        cpu = time.process_time() - cpu
    finally:
        shutil.rmtree(results_dir, ignore_errors=True)
    measured = throughput(trainer.step_times, batch, 1, warmup)
    return {"batch": batch, "warmup_steps": warmup, **measured,
            "step_times_s": [round(t, 2) for t in trainer.step_times],
            "cpu_ms_per_image_all_steps": round(1e3 * cpu / (batch * (warmup + steps)), 1)}


def table(report: dict) -> str:
    pipes, step = report["pipelines"], report.get("training_step")
    summary, ratio, size = pipes["summary"], pipes["ratio_ours_to_seed"], report["image_size"]
    later = summary["seed"]["later_epochs"] is not None
    lines = [f"{report['date'][:10]}, {pipes['photos']['count']} photos -> {size}x{size}, batch {report['batch']}, "
             f"{report['epochs']} epochs, median of {report['rounds']} interleaved rounds, "
             f"{report['machine']['cpus']} CPU cores",
             f"  {'pipeline':<44}{'img/s':>9}{'CPU ms/img':>12}{'1st batch s':>13}"]
    labels = {"seed": "seed (parallel map, .cache(), shuffle 1000)", "ours": "ours (uint8 cache files, sharded order)"}
    parts = [("first_epoch", "first epoch")] + ([("later_epochs", "later epochs")] if later else [])
    for key, title in parts:
        lines.append(f"  {title}:")
        for name in PIPELINES:
            run = summary[name][key]
            lines.append(f"    {labels[name]:<42}{run['images_per_sec']:>9,.0f}{run['cpu_ms_per_image']:>12.2f}"
                         f"{run['first_batch_s']:>13.2f}")
        lines.append(f"    ours / seed, within each round: {ratio[key]['median']:.2f}x "
                     f"(lowest {ratio[key]['min']:.2f}x)")
    lines += ["  memory (MB):            peak RSS  above start  at end: anonymous  file pages (shared)"
              "  bytes/image to device"]
    for name in PIPELINES:
        memory = summary[name]["memory"]
        lines.append(f"    {name:<20}{memory['peak_rss_mb']:>12,.0f}{memory['peak_above_start_mb']:>13,.0f}"
                     f"{memory['end_anon_mb']:>19,.0f}{memory['end_file_mb']:>21,.0f}"
                     f"{summary[name]['bytes_per_image_to_device']:>23,}")
    if step is None:
        return "\n".join(lines)
    lines += ["",
              f"Training step alone (ResNet50 {size}x{size}, batch {step['batch']}, float32, 1 device, "
              f"{step['timed_steps']} steps after {step['warmup_steps']} warm-up):",
              f"  {step['images_per_sec']:,.1f} img/s  (step p50 {step['step_time_p50_ms'] / 1e3:.2f} s)"]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=None,
                        help="an existing prepared TFDS dir holding cassava/0.1.0 (default: generate --photos)")
    parser.add_argument("--photos", type=int, default=1024, help="generated training photos (without --data-dir)")
    parser.add_argument("--image-size", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3,
                        help="epochs per pipeline and round: the first, then later ones")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--step-warmup", type=int, default=2, help="training steps left out (tracing)")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps")
    parser.add_argument("--skip-step", action="store_true", help="measure the input pipelines only")
    parser.add_argument("--work-dir", default="build/cassava-benchmark",
                        help="generated photos are kept here; our cache is built here and deleted")
    parser.add_argument("--json", default=None, help="also write the report here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", choices=PIPELINES, help=argparse.SUPPRESS)  # one pipeline, JSON to stdout
    args = parser.parse_args(argv)
    if min(args.epochs, args.rounds, args.batch_size) < 1:
        parser.error("--epochs, --rounds and --batch-size must be at least 1")
    # A --child reads the photos its parent generated under --work-dir: the parent checked the user's flags.
    user_paths.exit_if(None if args.child else (
        (args.data_dir and user_paths.folder_problem("--data-dir", args.data_dir))
        or user_paths.flags_problem({"--data-dir": args.data_dir}, {"--work-dir": args.work_dir},
                                    {"--json": args.json})))
    os.makedirs(args.work_dir, exist_ok=True)
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.data_dir:
        input_pipeline.cassava_builder(args.data_dir, allow_download=False)  # names what is missing
        data_dir = args.data_dir
    else:
        data_dir = prepare_photos(args.work_dir, args.photos)
    report = {
        "benchmark": "cassava-resnet input pipeline", "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": sys.argv, "data_dir": os.path.abspath(data_dir), "image_size": args.image_size,
        "batch": args.batch_size, "epochs": args.epochs, "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor()},
        "versions": versions(),
        "pipelines": benchmark_pipelines(data_dir, args),
    }
    if not args.skip_step:
        report["training_step"] = benchmark_training_step(args.image_size, args.batch_size, args.step_warmup,
                                                          args.steps, args.seed)
    print(table(report))
    if args.json:
        write_json(args.json, report)
        print(f"report: {args.json}")


if __name__ == "__main__":
    try:
        main()
    except input_pipeline.DataError as error:
        raise SystemExit(f"error: {error}") from None
