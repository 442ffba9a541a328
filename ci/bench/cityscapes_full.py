r"""cityscapes-unet's `resnet50` preset (what `invoke run cityscapes-unet --gpus 8` trained before the `full`
preset became mmsegmentation's UNet-S5-D16), measured as far as a CPU machine can: its input pipeline, and the
candidate models' step time, memory, size and reach.

    .venv/bin/python -m ci.bench.cityscapes_full --json docs/bench/cityscapes-unet/full-preset.json

Each part runs in a process of its own, so that each peak resident memory is that part's:
- the input pipeline (data.make_train_dataset) on --pairs generated full-size (1024x2048) scenes, prepared as
  prepare_data.py prepares Cityscapes, one pipeline as one GPU's process reads it (--launcher horovod: one
  process per GPU): the whole scene with a flip (the preset as it was), and a 512x1024 crop of a random zoom of
  0.5-2.0 with a flip, read from the PNGs and from memory (cache=True); images/s and CPU ms per image after the
  first batch;
- each candidate model at one image per replica: the plain UNet of model.build_unet (32 filters, depth 4), the
  same with the context module (encoders.context_module) in place of its bottleneck, and the ResNet50 U-Net
  (encoders.build_resnet50_unet, from scratch: the weights do not change the cost): its parameters, its
  theoretical receptive field (receptive_field below), its multiply-adds, the time of a training step (the
  recipe's loss, Adam) on a 512x1024 crop, the process's peak resident memory after those steps, and a forward
  pass at 1024x2048 with its output checked.

No GPU is measured here. What 8 GPUs would consume is an estimate, printed and kept as one: NVIDIA's published
ResNet-50 v1.5 training throughput (DeepLearningExamples, TensorFlow, 20.06 container, 224x224, mixed precision
+ XLA: 2,375 img/s on one A100 40GB, 1,270 img/s on one V100 16GB) scaled by multiply-adds per image to each
model at 512x1024, assuming the same multiply-adds per second; segmentation at high resolution is usually less
efficient on a GPU, so this is an upper bound on the rate the input pipeline must feed. The seed's own figure
(the plain UNet at 1024x2048, 8 V100s, 4 images each, AMP: 64 img/s, input included) checks the scaling.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPE_DIR = os.path.join(ROOT, "recipes", "cityscapes-unet")
CROP, FULL = (512, 1024), (1024, 2048)
NUM_CLASSES = 19
SEED = 0
MODELS = ("unet", "unet-context", "resnet50-unet")
PIPELINES = {  # name: (crop, scale, per-replica batch, cache)
    "whole scene, flip (preset as it was)": (None, 1.0, 4, False),
    "512x1024 crop, zoom 0.5-2.0, flip": (CROP, (0.5, 2.0), 2, False),
    "512x1024 crop, zoom 0.5-2.0, flip, cache": (CROP, (0.5, 2.0), 2, True),
}
# Published training throughput of ResNet-50 v1.5 at 224x224 (NVIDIA DeepLearningExamples,
# TensorFlow/Classification/ConvNets/resnet50v1.5/README.md, 20.06-tf1 container, mixed precision + XLA).
PUBLISHED = {"a100": 2375.0, "v100": 1270.0}
PUBLISHED_SOURCE = ("NVIDIA DeepLearningExamples, TensorFlow ResNet-50 v1.5 README, training performance "
                    "(20.06-tf1 container, 224x224, mixed precision + XLA): 2,375 img/s on 1 A100 40GB, "
                    "1,270 img/s on 1 V100 16GB")
# The seed material's full-size UNet run (../shared/PLATFORM.md): 8 GPUs (V100), 4 images each, AMP, 100 steps
# in 50 s with early sharding, input pipeline and start-up included.
SEED_UNET_V100 = 3200 / 50 / 8
GLOBAL_BATCH, ITERATIONS = 16, 80_000


# ## Receptive field and multiply-adds, from the model's graph

def _walk(model, states, size, macs, prefix=""):
    """Propagate (receptive field, jump, global) from `model`'s inputs (`states`, one per input) through its
    graph; add each convolution's multiply-adds at input `size` to `macs` (by layer path). Returns the states
    of its outputs. Jump is the distance in input pixels between neighbouring positions of a tensor."""
    import keras

    known = {id(tensor): state for tensor, state in zip(model.inputs, states, strict=True)}
    for depth in sorted(model._nodes_by_depth, reverse=True):
        for node in model._nodes_by_depth[depth]:
            layer = node.operation
            if isinstance(layer, keras.layers.InputLayer):
                continue
            ins = [known[id(t)] for t in node.input_tensors]
            if isinstance(layer, keras.Model):
                outs = _walk(layer, ins, size, macs, f"{prefix}{layer.name}/")
            else:
                outs = [_through(layer, ins, size, macs, prefix)] * len(node.output_tensors)
            for tensor, state in zip(node.output_tensors, outs, strict=True):
                known[id(tensor)] = state
    return [known[id(t)] for t in model.outputs]


def _through(layer, ins, size, macs, prefix):
    import keras
    import numpy as np

    field = max(state[0] for state in ins)
    jump = min(state[1] for state in ins)  # SpreadOver: the features' jump, not the pooled vector's
    everywhere = any(state[2] for state in ins)
    if isinstance(layer, keras.layers.Conv2D):
        if jump == float("inf"):  # on a pooled vector: one position
            macs[prefix + layer.name] = int(np.prod(layer.kernel.shape))
            return field, jump, everywhere
        field += (layer.kernel_size[0] - 1) * layer.dilation_rate[0] * jump
        jump *= layer.strides[0]
        macs[prefix + layer.name] = (size[0] / jump) * (size[1] / jump) * int(np.prod(layer.kernel.shape))
    elif isinstance(layer, (keras.layers.MaxPooling2D, keras.layers.AveragePooling2D)):
        field += (layer.pool_size[0] - 1) * jump
        jump *= layer.strides[0]
    elif isinstance(layer, (keras.layers.GlobalAveragePooling2D, keras.layers.GlobalMaxPooling2D)):
        return field, float("inf"), True  # one position that sees the whole input
    elif isinstance(layer, keras.layers.UpSampling2D):
        if layer.interpolation == "bilinear":
            field += jump  # each output mixes two neighbouring inputs along each axis
        jump /= layer.size[0]
    return field, jump, everywhere  # others (normalisation, activation, concatenation, SpreadOver) keep it


def receptive_field(model, size=CROP) -> dict:
    """The theoretical receptive field of `model`'s output (the span, in input pixels, of what one output
    pixel depends on through its convolutions and poolings; `whole_image` when a global pooling also feeds
    it), and its forward multiply-adds per image at `size` (convolutions only)."""
    macs = {}
    field, _, everywhere = _walk(model, [(1, 1, False)] * len(model.inputs), size, macs)[0]
    return {"pixels": int(field), "whole_image": everywhere, "macs": macs}


# ## The models

def build(name: str):
    import keras

    import encoders
    import model as unet

    def norm(kind):
        return lambda channels, layer: unet.normalization_layer(kind, channels, layer, 1)

    if name == "unet":
        return unet.build_unet(32, 4, 0.0, "group", num_classes=NUM_CLASSES)
    if name == "unet-context":
        # build_unet with encoders.context_module in place of its bottleneck's conv block
        filters, depth = 32, 4
        inputs = keras.Input((None, None, 3), name="image")
        x, skips = inputs, []
        for level in range(depth):
            x = unet.conv_block(x, filters * 2 ** level, "group", 0.0, f"down{level}")
            skips.append(x)
            x = keras.layers.MaxPooling2D(2, name=f"pool{level}")(x)
        x = encoders.context_module(x, filters * 2 ** depth, norm("group"), "context", encoders.atrous_rates(16))
        for level in reversed(range(depth)):
            x = keras.layers.UpSampling2D(2, name=f"up{level}")(x)
            x = keras.layers.Concatenate(name=f"skip{level}")([x, skips[level]])
            x = unet.conv_block(x, filters * 2 ** level, "group", 0.0, f"dec{level}")
        outputs = keras.layers.Conv2D(NUM_CLASSES, 1, activation="softmax", dtype="float32", name="categories")(x)
        return keras.Model(inputs, outputs, name="unet_context")
    if name == "resnet50-unet":
        return encoders.build_resnet50_unet(NUM_CLASSES, norm("batch"), None)
    raise ValueError(name)


def max_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def model_child(name: str, steps: int) -> dict:
    """One model in this process: its size, reach, a training step's time at 1x512x1024, peak memory, and a
    forward pass at 1x1024x2048."""
    import keras
    import numpy as np
    import tensorflow as tf

    import model as unet

    keras.utils.set_random_seed(SEED)
    started = time.perf_counter()
    net = build(name)
    built_s = time.perf_counter() - started
    rss_built = max_rss_mb()
    reach = receptive_field(net, CROP)
    macs = reach.pop("macs")
    backbone = sum(v for k, v in macs.items() if k.startswith("resnet50/"))
    rng = np.random.default_rng(SEED)
    images = tf.constant(rng.random((1, *CROP, 3), dtype=np.float32))
    truth = rng.integers(0, NUM_CLASSES, (1, *CROP)).astype(np.int32)
    truth[:, :32] = 255  # some ignored pixels, as the prepared classes have
    truth = tf.constant(truth)
    optimizer = keras.optimizers.Adam(1e-4)
    loss_fn = unet.cross_entropy_dice

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(y, net(x, training=True)))
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))
        return loss

    times = []
    for _ in range(steps + 1):  # the first traces the step
        begin = time.perf_counter()
        loss = float(step(images, truth))
        times.append(time.perf_counter() - begin)
    rss_train = max_rss_mb()
    try:
        info = tf.config.experimental.get_memory_info("CPU:0")
        tf_memory = {"peak_mb": round(info["peak"] / 2**20, 1)}
    except (ValueError, tf.errors.OpError) as error:
        tf_memory = {"error": " ".join(str(error).split())[:200]}

    forward = tf.function(lambda x: net(x, training=False))
    begin = time.perf_counter()
    probabilities = forward(tf.constant(rng.random((1, *FULL, 3), dtype=np.float32)))
    full_s = time.perf_counter() - begin
    sums = tf.reduce_sum(probabilities, axis=-1)
    return {
        "model": name, "keras_name": net.name, "parameters": net.count_params(),
        "trainable_parameters": int(sum(np.prod(v.shape) for v in net.trainable_variables)),
        "build_s": round(built_s, 2), "receptive_field_px": reach["pixels"], "whole_image": reach["whole_image"],
        "gmacs_512x1024": round(sum(macs.values()) / 1e9, 2), "gmacs_backbone_512x1024": round(backbone / 1e9, 2),
        "train_step_1x512x1024": {"first_s_with_trace": round(times[0], 2),
                                  "timed_s": [round(t, 2) for t in times[1:]],
                                  "median_s": round(float(np.median(times[1:])), 2), "loss": round(loss, 4)},
        "peak_rss_mb": {"after_build": rss_built, "after_training_steps": rss_train,
                        "after_forward_1024x2048": max_rss_mb()},
        "tf_memory_info_cpu": tf_memory,
        "forward_1x1024x2048": {"seconds_with_trace": round(full_s, 2), "output_shape": list(probabilities.shape),
                                "probabilities_sum_to_1": bool(abs(float(tf.reduce_max(abs(sums - 1.0)))) < 1e-3)},
    }


def resnet50_reference_gmacs() -> float:
    """ResNet-50's forward multiply-adds at 224x224 (what the published throughput is for), by the same count."""
    import keras

    backbone = keras.applications.ResNet50(weights=None, include_top=True)
    return sum(receptive_field(backbone, (224, 224))["macs"].values()) / 1e9


# ## The input pipeline

def pipeline_child(work: str, pairs: int, passes: int) -> dict:
    import numpy as np

    import data
    import make_fixture
    import prepare_data
    from tf_recipes.data import InputShard

    source, prepared = os.path.join(work, "source"), os.path.join(work, "prepared")
    begin = time.perf_counter()
    if not os.path.isdir(os.path.join(source, "leftImg8bit")):
        make_fixture.make_fixture(source, train=pairs, val=0, size=FULL, seed=SEED)
    problems = prepare_data.prepare(source, prepared, splits=("train",), log=lambda line: None)
    if problems:
        raise SystemExit("preparing the fixture failed:\n  " + "\n  ".join(problems))
    with open(os.path.join(prepared, "train.json")) as handle:
        index_format = json.load(handle).get("format")
    made_s = time.perf_counter() - begin
    results = {}
    for label, (crop, scale, batch, cache) in PIPELINES.items():
        steps = pairs * passes // batch
        dataset = data.make_train_dataset(prepared, InputShard(1, 0, batch, batch), steps, SEED, crop=crop,
                                          scale=scale, cache=cache)
        iterator = iter(dataset)
        images, truth = next(iterator)  # the first batch builds the pipeline (and fills the cache)
        wall, cpu, count = time.perf_counter(), time.process_time(), 0
        for batch_images, batch_truth in iterator:
            count += int(batch_images.shape[0])
            images, truth = batch_images, batch_truth
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        values = np.unique(truth.numpy())
        results[label] = {"per_replica_batch": batch, "images": count, "images_per_sec": round(count / wall, 2),
                          "cpu_ms_per_image": round(1000 * cpu / count, 1), "batch_shape": list(images.shape),
                          "truth_values": [int(v) for v in values]}
    return {"pairs": pairs, "size": list(FULL), "index_format": index_format, "fixture_s": round(made_s, 1),
            "variants": results, "peak_rss_mb": max_rss_mb()}


# ## The run

def child(args) -> dict:
    sys.path[:0] = [RECIPE_DIR, os.path.join(ROOT, "common")]
    if args.child == "pipeline":
        return pipeline_child(args.work_dir, args.pairs, args.passes)
    if args.child == "reference":
        return {"resnet50_224_gmacs": round(resnet50_reference_gmacs(), 3)}
    return model_child(args.child, args.steps)


def run_child(name: str, args) -> dict:
    command = [sys.executable, "-m", "ci.bench.cityscapes_full", "--child", name, "--work-dir", args.work_dir,
               "--pairs", str(args.pairs), "--passes", str(args.passes), "--steps", str(args.steps)]
    begin = time.perf_counter()
    process = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if process.returncode:
        raise SystemExit(f"cityscapes_full: {name} failed:\n{process.stderr[-3000:]}")
    result = json.loads(process.stdout.strip().splitlines()[-1])
    result["process_s"] = round(time.perf_counter() - begin, 1)
    print(f"  {name}: {result['process_s']} s", flush=True)
    return result


def estimates(models: dict, pipeline: dict, reference_gmacs: float) -> dict:
    """What 8 GPUs would consume of each model, scaled from the published ResNet-50 figure, and what the input
    pipeline needs for it, from its measured CPU time per image."""
    crop_png = pipeline["variants"]["512x1024 crop, zoom 0.5-2.0, flip"]["cpu_ms_per_image"]
    crop_cache = pipeline["variants"]["512x1024 crop, zoom 0.5-2.0, flip, cache"]["cpu_ms_per_image"]
    out = {}
    for name, result in models.items():
        ratio = reference_gmacs / result["gmacs_512x1024"]
        row = {}
        for gpu, rate in PUBLISHED.items():
            per_gpu = rate * ratio
            job = 8 * per_gpu
            step_s = GLOBAL_BATCH / job
            row[gpu] = {"img_per_s_per_gpu": round(per_gpu, 1), "img_per_s_8_gpus": round(job, 1),
                        "step_s_at_global_batch_16": round(step_s, 4),
                        "hours_for_80k_iterations": round(ITERATIONS * step_s / 3600, 2),
                        "input_cores_needed_png": round(job * crop_png / 1000, 1),
                        "input_cores_needed_cached": round(job * crop_cache / 1000, 1)}
        out[name] = row
    unet_full = models["unet"]["gmacs_512x1024"] * 4
    out["check_seed_unet_1024x2048_v100"] = {
        "predicted_img_per_s_per_gpu": round(PUBLISHED["v100"] * reference_gmacs / unet_full, 1),
        "seed_measured_img_per_s_per_gpu": SEED_UNET_V100,
        "note": "the seed's figure includes its input pipeline and start-up over 100 steps"}
    return out


def table(report: dict) -> str:
    lines = [f"{report['date']}, {report['machine']['cores']} CPUs ({report['machine']['cpu']}), "
             f"TF {report['versions']['tensorflow']}, Keras {report['versions']['keras']}, load average at start "
             f"{report['machine']['load_average_at_start'][0]:.2f}", "",
             f"Input pipeline: one GPU process's pipeline, {report['pipeline']['pairs']} generated 1024x2048 scenes "
             f"(index {report['pipeline']['index_format']}), after the first batch",
             f"{'variant':45} {'batch':>5} {'images/s':>9} {'CPU ms/image':>13}"]
    for label, v in report["pipeline"]["variants"].items():
        lines.append(f"{label:45} {v['per_replica_batch']:>5} {v['images_per_sec']:>9.2f} "
                     f"{v['cpu_ms_per_image']:>13.1f}")
    lines += ["", "Models at 1 image per replica (float32, CPU); receptive field in input pixels (+whole: an "
              "image-level pooling feeds every pixel); peak RSS after the training steps; TF peak: "
              "tf.config.experimental.get_memory_info('CPU:0'), the allocator's peak",
              f"{'model':15} {'parameters':>11} {'RF px':>6} {'+whole':>6} {'GMACs 512x1024':>15} "
              f"{'step s 512x1024':>16} {'peak RSS MB':>12} {'TF peak MB':>11} {'fwd 1024x2048 s':>16}"]
    for name, m in report["models"].items():
        lines.append(f"{name:15} {m['parameters']:>11,} {m['receptive_field_px']:>6} {str(m['whole_image']):>6} "
                     f"{m['gmacs_512x1024']:>15.1f} {m['train_step_1x512x1024']['median_s']:>16.2f} "
                     f"{m['peak_rss_mb']['after_training_steps']:>12,.0f} "
                     f"{m['tf_memory_info_cpu'].get('peak_mb', float('nan')):>11,.0f} "
                     f"{m['forward_1x1024x2048']['seconds_with_trace']:>16.2f}")
    lines += ["", f"Estimate, not a measurement: {PUBLISHED_SOURCE}, scaled by multiply-adds per image "
              f"(ResNet-50 at 224x224: {report['reference']['resnet50_224_gmacs']} GMACs by the same count); "
              f"global batch {GLOBAL_BATCH}, {ITERATIONS:,} iterations",
              f"{'model':15} {'gpu':5} {'img/s/GPU':>10} {'img/s x8':>9} {'step s':>7} {'hours 80k':>10} "
              f"{'input cores PNG':>16} {'cached':>7}"]
    for name in report["models"]:
        for gpu, e in report["estimates"][name].items():
            lines.append(f"{name:15} {gpu:5} {e['img_per_s_per_gpu']:>10.1f} {e['img_per_s_8_gpus']:>9.1f} "
                         f"{e['step_s_at_global_batch_16']:>7.3f} {e['hours_for_80k_iterations']:>10.2f} "
                         f"{e['input_cores_needed_png']:>16.1f} {e['input_cores_needed_cached']:>7.1f}")
    check = report["estimates"]["check_seed_unet_1024x2048_v100"]
    lines.append(f"check: the plain UNet at 1024x2048 on a V100, predicted {check['predicted_img_per_s_per_gpu']} "
                 f"img/s per GPU by this scaling; the seed measured {check['seed_measured_img_per_s_per_gpu']} "
                 "(input and start-up included)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--work-dir", help="where the generated scenes go (default: a temporary folder)")
    parser.add_argument("--pairs", type=int, default=8, help="generated 1024x2048 scenes")
    parser.add_argument("--passes", type=int, default=3, help="passes over them per pipeline variant")
    parser.add_argument("--steps", type=int, default=2, help="timed training steps per model, after one")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cityscapes-full-") as temporary:
        args.work_dir = args.work_dir or temporary
        print("cityscapes-unet full preset, each part in a process of its own:", flush=True)
        pipeline = run_child("pipeline", args)
        models = {name: run_child(name, args) for name in args.models.split(",")}
        reference = run_child("reference", args)

    import keras
    import tensorflow as tf

    from ci.bench.time_to_accuracy import machine
    from tf_recipes.reporting import write_json

    report = {
        "date": datetime.date.today().isoformat(), "machine": machine(),
        "versions": {"tensorflow": tf.__version__, "keras": keras.__version__, "python": platform.python_version()},
        "command": "python -m ci.bench.cityscapes_full " + " ".join(sys.argv[1:] if argv is None else argv),
        "pipeline": pipeline, "models": models, "reference": reference,
        "estimate_source": PUBLISHED_SOURCE,
        "estimate_assumption": "the same multiply-adds per second as ResNet-50 at 224x224 (an upper bound for "
                               "segmentation at 512x1024); input cores = the 8 GPUs' rate x the pipeline's measured "
                               "CPU time per image on this machine",
        "estimates": estimates(models, pipeline, reference["resnet50_224_gmacs"]),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print("\n" + table(report))
    print(f"\nwhole run: {report['wall_s']} s")
    if args.json:
        write_json(args.json, report)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
