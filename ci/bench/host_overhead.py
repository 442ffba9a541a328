r"""What the training loop costs on the host: tf_recipes.training's loop against a bare tf.function loop.

    .venv/bin/python -m ci.bench.host_overhead --batch-size 1 --steps 1500 --rounds 5 \
        --json docs/bench/host-overhead.json

Both train the mnist-cnn model (dropout on, Adam) on the same synthetic data through the recipe's own
input pipeline, one replica, on this machine. The bare loop is what one writes by hand: one
`tf.function` call per step (GradientTape, apply_gradients), no host reads until the end. The
recipe's loop adds everything it guarantees (per-step stop flag, loss check, logging, results) and
runs `--steps-per-loop` steps per call; it is timed at each K given with --loops. Variants run
interleaved over --rounds in one process, each on a fresh model, in reversed order every other round;
reported are the median images/s and each loop's ratio to the bare loop taken within each round (the
median and the lowest round). Small batches show the overhead; at batch 32 and above it is lost in the
step itself.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "recipes", "mnist-cnn")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import data as mnist_data  # noqa: E402  (recipes/mnist-cnn/data.py)
import train as mnist  # noqa: E402
from tf_recipes import training, user_paths  # noqa: E402
from tf_recipes.config import RunConfig  # noqa: E402
from tf_recipes.data import InputShard  # noqa: E402
from tf_recipes.launchers import create_launcher  # noqa: E402

BARE = "bare tf.function loop"


def dataset(images, labels, batch, steps, seed):
    return mnist_data.make_train_dataset(images, labels, InputShard(1, 0, batch, batch), steps, seed, 0)


def bare_loop(images, labels, batch, steps, warmup, seed) -> float:
    """Images/s of a hand-written loop: one tf.function call per step, nothing read back."""
    keras.utils.set_random_seed(seed)
    model, optimizer = mnist.build_model(), keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, model(x, training=True)))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    iterator = iter(dataset(images, labels, batch, steps, seed))
    for _ in range(warmup):
        step(*next(iterator))
    step(*next(iterator)).numpy()  # the warm-up has finished on the device, too
    start = time.perf_counter()
    for _ in range(steps - warmup - 1):
        loss = step(*next(iterator))
    loss.numpy()
    return batch * (steps - warmup - 1) / (time.perf_counter() - start)


def recipe_loop(launcher, images, labels, batch, steps, warmup, seed, steps_per_loop) -> float:
    """Images/s of tf_recipes.training's loop over the steps after `warmup`."""
    keras.utils.set_random_seed(seed)
    with tempfile.TemporaryDirectory() as folder:
        config = RunConfig(batch_size=batch, max_steps=steps, results_dir=folder, log_every=steps,
                           checkpoint_every=steps, warmup_steps=warmup, steps_per_loop=steps_per_loop, seed=seed)
        trainer = training.Trainer(launcher, "mnist-cnn", config, config.plan(len(images), launcher.num_replicas),
                                   model=mnist.build_model(), optimizer=keras.optimizers.Adam(1e-3), task=mnist.TASK)
        trainer.fit(dataset(images, labels, batch, steps, seed))
    timed = trainer.step_times[warmup:]
    return batch * len(timed) / sum(timed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1500, help="steps per variant and round")
    parser.add_argument("--warmup", type=int, default=100, help="first steps left out (tracing, autotuning)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loops", default="1,10", help="--steps-per-loop values of the recipe's loop to time")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    user_paths.exit_if(user_paths.flags_problem({}, files={"--json": args.json}))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    launcher = create_launcher("single")
    images, labels, _, _ = mnist_data.synthetic_mnist(42, train=max(args.steps * args.batch_size, 1000), test=10)
    variants = {BARE: lambda: bare_loop(images, labels, args.batch_size, args.steps, args.warmup, 42)}
    for k in (int(k) for k in args.loops.split(",")):
        variants[f"recipe loop, --steps-per-loop {k}"] = (
            lambda k=k: recipe_loop(launcher, images, labels, args.batch_size, args.steps, args.warmup, 42, k))
    rates = {name: [] for name in variants}
    names = list(variants)
    for round_index in range(args.rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:  # no variant always goes first
            rates[name].append(variants[name]())
            print(f"round {round_index + 1}: {name}: {rates[name][-1]:,.1f} img/s", file=sys.stderr, flush=True)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    # Each ratio is taken within a round, where both loops shared the machine's state.
    ratios = {name: [rate / bare for rate, bare in zip(values, rates[BARE], strict=True)]
              for name, values in rates.items()}
    print(f"\nmnist-cnn, batch {args.batch_size}, 1 replica, {args.steps} steps ({args.warmup} warm-up), "
          f"{args.rounds} interleaved rounds\n")
    print("| loop | images/s (median) | vs bare loop (median of rounds) | lowest round |\n|---|---:|---:|---:|")
    for name in names:
        print(f"| {name} | {medians[name]:,.1f} | {statistics.median(ratios[name]):.3f}x | {min(ratios[name]):.3f}x |")
    if args.json:
        user_paths.exit_if(user_paths.make_folder(*user_paths.folder_of("--json", args.json)))
        with open(args.json, "w") as handle:
            json.dump({"date": started, "batch_size": args.batch_size, "steps": args.steps, "warmup": args.warmup,
                       "rounds": rates, "medians": medians, "ratios": ratios,
                       "command": ["-m", "ci.bench.host_overhead", *sys.argv[1:]], "cpus": os.cpu_count(),
                       "load_average": [round(load, 2) for load in os.getloadavg()],
                       "tensorflow": tf.__version__, "keras": keras.__version__}, handle, indent=2)


if __name__ == "__main__":
    main()
