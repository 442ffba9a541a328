"""Cityscapes UNet: full-resolution (1024x2048) semantic segmentation, trained and scored as the benchmark does.

Trains a UNet on the Cityscapes `train` split prepared by `prepare_data.py`: the 19 evaluation classes
(trainIds; every other label ignored in the loss and the metric), or with `--classes categories` the 7
categories (void ignored). It evaluates on `val` as cityscapesScripts does, at full resolution: the class
mean IoU and the category mean IoU with their per-class tables, and `--predict-dir` writes colour PNGs
or (`--predict-format labelids`) label-id PNGs that the official evaluation reads. Data prepared with
`prepare_data.py --format pairs` (your own images, masks and classes file) trains with its own classes:
their count, colours and ignored class come from the prepared index. The same script runs under every
launcher:

    python recipes/cityscapes-unet/train.py --data-dir data/cityscapes
    python recipes/cityscapes-unet/train.py --launcher mirrored --data-dir data/cityscapes   # all local GPUs
    horovodrun -np 8 -H localhost:8 python recipes/cityscapes-unet/train.py --launcher horovod --amp ...

or `invoke run cityscapes-unet --gpus 8 --data-dir data/cityscapes`.

`--preset full` (default) trains a U-Net decoder on ResNet50 on 512x1024 crops of full-size scenes, 2 per
replica, with batch norm; `--preset cpu` is a smaller model on whole scenes shrunk to about 128 rows
(128x256 for Cityscapes), scored at full size, for a CPU; `--preset tiny` one on small crops, which the
test suite trains. `--benchmark` trains on generated tensors of the preset's
size for a fixed number of steps, so that it measures compute without the input pipeline.
"""
import argparse
import math
import os

from tf_recipes import cli

RECIPE = "cityscapes-unet"


# ## Command line
# Parsed before TensorFlow is imported, so that --help and a mistyped flag answer at once. A preset
# sets the model's size and the training crop; flags override any of them.

NORMALIZATIONS = ("none", "group", "batch")  # model.NORMALIZATIONS, without importing Keras first

AUTO, SEEN_ROWS = "auto", 128  # --downscale auto: the scenes shrunk by a power of two to about 128 rows


def downscale_for(size, depth: int) -> int:
    """--downscale auto: the largest power of two that divides both sides and leaves at least SEEN_ROWS
    rows, with sides the UNet of `depth` takes (multiples of 2**depth); 1 when none does."""
    best, factor = 1, 2
    while size[0] // factor >= SEEN_ROWS and not (size[0] % factor or size[1] % factor):
        if not any(side // factor % 2 ** depth for side in size):
            best = factor
        factor *= 2
    return best


def downscale(text):
    return text if text == AUTO else cli.positive_int(text)


MODELS = ("unet", "resnet50-unet")  # model.MODELS, without importing Keras first
IMAGENET_FILE = "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"


def encoder_weights(text):
    if text in ("imagenet", "none") or os.path.isfile(text):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is neither imagenet, none nor a file of ResNet50's weights "
                                     f"(e.g. {IMAGENET_FILE}, downloaded elsewhere)")


PRESETS = {
    # As strong Cityscapes recipes train (README, "The full preset"): 512x1024 crops of scenes zoomed by 0.5 to
    # 2.0, flipped; a U-Net decoder with a context module on an ImageNet-pretrained ResNet50 (the plain UNet sees
    # 200 px, a fifth of a scene's height); 80,000 iterations at a global batch of 16 (2 per GPU on 8 GPUs),
    # Adam on a cosine rate after a warm-up. Batch norm in the decoder computes the same on a crop as on a
    # whole scene in inference; the encoder's pretrained statistics stay frozen.
    "full": dict(model="resnet50-unet", encoder_weights="imagenet", crop=(512, 1024), downscale=1, scale=(0.5, 2.0),
                 cache=False, norm="batch", filters=32, depth=5, batch_size=2, iterations=80_000, epochs=None,
                 lr=1e-4, lr_schedule="cosine", lr_warmup_steps=1000),
    # Whole scenes about 128 rows high (1/8 of Cityscapes' 1024x2048: 128x256), kept decoded in memory: 600
    # steps of 8 scenes for 80 training scenes, about 8 minutes on the 2-core CI machine, evaluation included
    # (the README's Results and Model and training say what each choice measured).
    "cpu": dict(model="unet", encoder_weights=None, crop=None, downscale=AUTO, scale=(1.0, 1.0), cache=True,
                norm="group", filters=16, depth=4, batch_size=8, iterations=None, epochs=60, lr=2e-3,
                lr_schedule="cosine", lr_warmup_steps=20),
    "tiny": dict(model="unet", encoder_weights=None, crop=(64, 128), downscale=1, scale=(0.75, 1.25), cache=False,
                 norm="none", filters=8, depth=2, batch_size=2, iterations=None, epochs=50, lr=1e-3,
                 lr_schedule="constant", lr_warmup_steps=100),
}
FULL_SIZE = (1024, 2048)


def size(text):
    try:
        height, width = (int(side) for side in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not HEIGHTxWIDTH, e.g. 512x1024") from None
    if height < 1 or width < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: both sides must be at least 1")
    return height, width


def scale_range(text):
    try:
        low, high = (float(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not MIN:MAX, e.g. 0.75:1.25") from None
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        raise argparse.ArgumentTypeError(f"{text!r}: need finite 0 < MIN <= MAX, e.g. 0.75:1.25")
    return low, high


def parse_args(argv=None):
    parser = cli.training_parser(__doc__.split("\n")[0], batch_size=None, epochs=None, lr=None,
                                 metrics=("mean_iou", "category_mean_iou"))
    # A full-resolution step takes far longer than the host's ~0.5 ms per call: one step per call
    # keeps a stop signal answered within one step. The rate's schedule is the preset's unless given.
    parser.set_defaults(steps_per_loop=1, lr_schedule=None, lr_warmup_steps=None)
    model = parser.add_argument_group("cityscapes-unet")
    # tiny (small crops of a small model) is what the test suite trains: accepted, not offered in --help
    model.add_argument("--preset", choices=sorted(PRESETS), default="full", metavar="{full,cpu}",
                       help="full: the 8-GPU configuration (README, \"The full preset\"); cpu: a smaller model on "
                            "downscaled whole scenes, for a CPU")
    model.add_argument("--classes", choices=("classes", "categories"),
                       help="what to train on Cityscapes data: the 19 evaluation classes (default) or the 7 "
                            "categories; both ignore every other label. Your own data: its classes")
    model.add_argument("--model", choices=MODELS,
                       help="unet: the plain UNet (--filters, --depth); resnet50-unet: a U-Net decoder with a "
                            "context module on ResNet50 (default: the preset's, resnet50-unet for full)")
    model.add_argument("--encoder-weights", type=encoder_weights,
                       help="resnet50-unet's encoder: imagenet (Keras downloads them), a file of ResNet50's weights "
                            f"({IMAGENET_FILE}, for a machine that cannot download), or none: from scratch "
                            "(default: the preset's, imagenet for full; --benchmark starts from scratch)")
    model.add_argument("--iterations", type=cli.positive_int,
                       help="train this many global steps, the rate's schedule spanning them (default: the "
                            "preset's, 80000 for full; the others count --epochs)")
    model.add_argument("--filters", type=cli.positive_int, help="filters of the first level (doubles per level)")
    model.add_argument("--depth", type=cli.positive_int, help="down-sampling levels")
    model.add_argument("--dropout", type=cli.rate, default=0.0, help="dropout after every conv block")
    model.add_argument("--norm", choices=NORMALIZATIONS,
                       help="normalisation after each convolution (default: the preset's, group but for tiny): "
                            "none (the same in training and inference, on crops and whole images), group (per "
                            "image, over its whole extent), batch (per replica's batch; moving statistics in "
                            "inference)")
    model.add_argument("--batch-norm", dest="norm", action="store_const", const="batch", help="same as --norm batch")
    model.add_argument("--no-batch-norm", dest="norm", action="store_const", const="none",
                       help="same as --norm none")
    model.add_argument("--downscale", type=downscale,
                       help="N or auto: the model sees the scenes at 1/N of their prepared size, in training and "
                            "evaluation, and its prediction is scored at full size; auto: the largest power of two "
                            f"that leaves {SEEN_ROWS} rows or more (default: the preset's, auto for cpu)")
    model.add_argument("--crop", type=size,
                       help="training crop HEIGHTxWIDTH, at the --downscale size (default: the preset's; none: the "
                            "whole scene)")
    model.add_argument("--scale", type=scale_range, help="random zoom range MIN:MAX (default: the preset's)")
    model.add_argument("--no-augment", action="store_true", help="no zoom, crop position or flip augmentation")
    model.add_argument("--cache", action=argparse.BooleanOptionalAction,
                       help="keep the training images in memory, decoded at the --downscale size (default: the "
                            "preset's)")
    model.add_argument("--shard-late", action="store_true",
                       help="decode everything, then shard (the slow variant, for comparison)")
    model.add_argument("--eval-size", type=size,
                       help="resize val images to HEIGHTxWIDTH for the model; the prediction is resized back to "
                            "the categories, which are never resized (default: 1/--downscale of the prepared size)")
    model.add_argument("--eval-batch-size", type=cli.positive_int, default=2)
    model.add_argument("--predict-dir", help="write the predictions for the val images here (--predict-format)")
    model.add_argument("--predict-format", choices=("colour", "labelids"), default="colour",
                       help="colour: image | prediction | truth PNGs of --predict-count scenes; labelids: every "
                            "val scene's prediction as Cityscapes label ids at full size, CITY/ID_pred_labelIds.png, "
                            "as cityscapesScripts' csEvalPixelLevelSemanticLabeling reads them")
    model.add_argument("--predict-count", type=cli.positive_int, default=8)
    model.add_argument("--benchmark", action="store_true",
                       help="generated full-size tensors, --max-steps (default 20) after --warmup-steps; no eval")
    args = parser.parse_args(argv)
    given_epochs = args.epochs is not None
    for key, value in PRESETS[args.preset].items():  # a flag given overrides its preset's value
        if getattr(args, key) is None:
            setattr(args, key, value)
    if given_epochs and args.iterations == PRESETS[args.preset]["iterations"]:
        args.iterations = None  # --epochs given: the preset's iterations give way to it
    if args.encoder_weights == "none":
        args.encoder_weights = None
    if args.benchmark:
        args.max_steps = args.max_steps or 20
    multiple = 2 ** args.depth
    for flag, value in (("--crop", args.crop), ("--eval-size", args.eval_size)):
        if value and (value[0] % multiple or value[1] % multiple):
            parser.error(f"{flag} {value[0]}x{value[1]}: both sides must be multiples of {multiple} (2**depth)")
    return args


if __name__ == "__main__":
    ARGS = parse_args()

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import data  # noqa: E402
from tf_recipes import export, training  # noqa: E402
from tf_recipes.data import DataError  # noqa: E402
from tf_recipes.launchers import create_launcher  # noqa: E402
import layout  # noqa: E402
from labels import cityscapes_views  # noqa: E402
import model as model_lib  # noqa: E402
from model import at_truth_size, confusion_sums, cross_entropy_dice, summarize, truth_sums  # noqa: E402


# ## Data
# Prepared PNGs, sharded by file before any read (data.py); --benchmark and --synthetic feed one
# generated batch over and over, so that the step time is compute only.

def describe_data(args, launcher):
    """(training examples, the view trained (labels.py: class names, colours, ...), image size
    HEIGHTxWIDTH) of this run: the prepared folder's (Cityscapes' 19 classes or 7 categories, or the
    user's classes of prepare_data.py --format pairs), or, for generated data, Cityscapes' at the full
    size or --crop."""
    if args.benchmark or args.synthetic:
        # Distributed: generated examples for the steps of the global batch (per-replica batch x replicas)
        num_examples = (args.max_steps or 20) * args.batch_size * launcher.num_replicas
        if args.downscale == AUTO:
            args.downscale = downscale_for(FULL_SIZE, args.depth)
        whole = (FULL_SIZE[0] // args.downscale, FULL_SIZE[1] // args.downscale)
        return num_examples, {**cityscapes_views()[args.classes or "classes"], "name": args.classes or "classes"}, \
            args.crop or whole
    if not args.data_dir:
        raise DataError("--data-dir is required: the folder written by "
                        "`python recipes/cityscapes-unet/prepare_data.py --source CITYSCAPES --out DIR` "
                        "(or use --benchmark for generated data)")
    num_examples = data.num_examples(args.data_dir, "train")
    view = data.view(args.data_dir, args.classes)
    if args.predict_dir and args.predict_format == "labelids" and "label_ids" not in view:
        raise DataError(f"--predict-format labelids writes Cityscapes label ids, and the data in {args.data_dir} "
                        "has its own classes; use --predict-format colour")
    size = data.image_size(args.data_dir)
    if args.downscale == AUTO:
        args.downscale = downscale_for(size, args.depth)
    if any(side % args.downscale for side in size):
        raise DataError(f"the images in {args.data_dir} are {size[0]}x{size[1]}, which --downscale "
                        f"{args.downscale} does not divide; choose a --downscale that divides both sides, or "
                        "prepare them with --size HxW")
    # The size the model sees val images at; the prediction is scored at `size`
    args.eval_size = args.eval_size or (size[0] // args.downscale, size[1] // args.downscale)
    if any(side % 2 ** args.depth for side in args.eval_size):  # the UNet's skips need this
        seen = f", seen at {args.eval_size[0]}x{args.eval_size[1]}" if tuple(args.eval_size) != tuple(size) else ""
        raise DataError(f"the images in {args.data_dir} are {size[0]}x{size[1]}{seen}; the UNet of --depth "
                        f"{args.depth} needs sides that are multiples of {2 ** args.depth}: prepare them with "
                        "--size HxW, or pass --eval-size and --crop")
    return num_examples, view, size


def synthetic_dataset(shard, height, width, steps, seed, num_classes):
    rng = np.random.default_rng(seed + shard.pipeline_id)  # Distributed: each input pipeline draws its own batch
    images = rng.random((shard.per_replica_batch, height, width, 3), dtype=np.float32) * 255  # pixels 0..255
    labels = rng.integers(0, num_classes, (shard.per_replica_batch, height, width), dtype=np.int32)
    # Distributed: the replicas this input pipeline feeds, each a batch per step
    local_replicas = shard.global_batch // shard.num_pipelines // shard.per_replica_batch
    return tf.data.Dataset.from_tensors((images, labels)).repeat(steps * local_replicas)


# ## Model
# The UNet, its loss (cross-entropy plus Dice, both blind to ignored pixels) and its metric (a confusion
# matrix, from which the class and category IoU follow as cityscapesScripts computes them) are in model.py.

def build_model(args, num_classes, encoder_weights=None):
    try:
        return model_lib.build_model(args.model, num_classes, args.filters, args.depth, args.dropout, args.norm,
                                     encoder_weights)
    except ValueError as error:  # the encoder's weights could not be had: one line, and what to pass instead
        raise DataError(f"--encoder-weights {encoder_weights}: {error}") from None


def schedule_in_iterations(args, num_examples, replicas):
    """--iterations (the full preset's schedule, in iterations as published recipes give it): --max-steps at
    them, and the epochs that hold them, which the rate's schedule spans."""
    steps_per_epoch = max(1, num_examples // (args.batch_size * replicas))
    args.epochs = -(-args.iterations // steps_per_epoch)
    args.max_steps = min(args.max_steps or args.iterations, args.iterations)


def task_for(view):
    return training.Task(loss_fn=cross_entropy_dice, metric_sums=confusion_sums,
                         summarize=summarize(view.get("group_of")), baseline_sums=truth_sums)


# ## Training
# The same lines under every launcher, as in mnist-cnn; the mean IoU on val and the prediction PNGs
# come after training.

def val_evaluation(args, launcher, view):
    """This process's share of the val images (as Trainer.fit's `evaluation` takes it), and the
    one line that names a val file that fails to read."""
    # Distributed: this process's share of the val images
    # (every process evaluates its own share; the sums are added up over processes)
    share = launcher.eval_share(data.num_examples(args.data_dir, "val"))
    return (lambda: data.make_eval_dataset(args.data_dir, "val", batch_size=args.eval_batch_size,
                                           size=args.eval_size, share=share, classes=view["name"]),
            lambda: data.bad_example_message(args.data_dir, "val", range(share.start, share.stop),
                                             "read for evaluation"))


def evaluate(args, launcher, trainer, model, view, explain):
    """Class and category IoU on the val images at the step training ended, and --predict-dir's PNGs:
    results.json's final_metrics."""
    val = trainer.evaluate(explain_input_error=explain)
    category = f"  category mean IoU {val['category_mean_iou']:.4f}" if "category_mean_iou" in val else ""
    training.log(launcher, f"val: loss {val['loss']:.4f}  mean IoU {val['mean_iou']:.4f}{category}")
    if args.predict_dir and launcher.is_chief:  # Distributed: the chief writes the prediction PNGs
        write = write_label_ids if args.predict_format == "labelids" else write_colours
        written = write(model, args.data_dir, args.predict_dir, args.predict_count, args.eval_size, view)
        training.log(launcher, f"wrote {written} prediction PNGs to {args.predict_dir}")
    return {"val": val}


def predictions(model, data_dir, eval_size, view):
    """(example id, image, truth, predicted class) of every val scene, predicted at full size: the
    probabilities resized to the truth, then the argmax."""
    examples = data.read_index(data_dir, "val")["examples"]
    scenes = data.make_eval_dataset(data_dir, "val", batch_size=1, size=eval_size, classes=view["name"])
    for example_id, (images, truth) in zip(examples, scenes, strict=True):
        yield example_id, images[0], truth[0], tf.argmax(at_truth_size(truth, model(images, training=False)), -1)[0]


def write_colours(model, data_dir, folder, count, eval_size, view):
    """Colour PNGs (one colour per class, black where ignored) of image | prediction | truth for `count`
    val scenes."""
    os.makedirs(folder, exist_ok=True)
    palette = tf.constant([*view["colours"], *[(0, 0, 0)] * (256 - len(view["colours"]))], tf.uint8)
    written = 0
    for _, image, truth, predicted in predictions(model, data_dir, eval_size, view):
        if written == count:
            break
        image = tf.image.resize(image, tf.shape(truth))
        row = tf.concat([tf.saturate_cast(tf.round(image), tf.uint8), tf.gather(palette, predicted),
                         tf.gather(palette, truth)], axis=1)
        tf.io.write_file(os.path.join(folder, f"val_{written:04d}.png"), tf.io.encode_png(row))
        written += 1
    return written


def write_label_ids(model, data_dir, folder, count, eval_size, view):
    """Every val scene's prediction as a PNG of Cityscapes label ids at the labels' size, named as
    cityscapesScripts finds them: CITY/CITY_SEQ_FRAME_pred_labelIds.png."""
    to_label_id = tf.constant(view["label_ids"], tf.uint8)
    written = 0
    for example_id, _, _, predicted in predictions(model, data_dir, eval_size, view):
        path = os.path.join(folder, example_id + layout.PREDICTION_SUFFIX)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tf.io.write_file(path, tf.io.encode_png(tf.gather(to_label_id, predicted)[..., None]))
        written += 1
    return written


def main(args):
    # Distributed: the launcher (--launcher), first: it may split the CPU into replicas before TF starts
    launcher = create_launcher(args.launcher, args.cpu_replicas, args.collective, args.join_timeout)
    keras.utils.set_random_seed(args.seed)
    training.configure_precision(args.amp)

    synthetic = args.benchmark or args.synthetic
    num_examples, view, size = describe_data(args, launcher)
    class_names, task = view["names"], task_for(view)
    if args.iterations:
        schedule_in_iterations(args, num_examples, launcher.num_replicas)
    # What finish() exports, checked now: RGB scenes in, at --eval-size; a class a pixel out, at the data's size
    exported = export.ExportSpec(task=export.SEGMENTATION, class_names=class_names, palette=view["colours"],
                                 image_size=args.eval_size or size, output_size=size, antialias=True, channels=3,
                                 build=lambda: build_model(args, len(class_names)))
    trainer = training.Trainer(launcher, RECIPE, cli.run_config(args), num_examples=num_examples, export=exported)

    with launcher.scope():  # Distributed: model and optimizer variables on every replica
        # --benchmark measures compute on generated tensors: the encoder's weights do not change it
        model = build_model(args, len(class_names), None if args.benchmark else args.encoder_weights)
        # Distributed: with --scale-lr, the rate times the replicas, reached over --lr-warmup-steps
        rate = training.learning_rate(args.lr, launcher, args.scale_lr, args.lr_warmup_steps, args.lr_schedule,
                                      trainer.planned_steps)
        optimizer = keras.optimizers.Adam(rate)
    trainer.setup(model, optimizer)

    def dataset_fn(shard):
        if synthetic:
            return synthetic_dataset(shard, *size, trainer.total_steps - trainer.start_step, args.seed,
                                     len(class_names))
        return data.make_train_dataset(
            args.data_dir, shard, trainer.total_steps, args.seed, trainer.start_step, crop=args.crop,
            scale=args.scale, augment=not args.no_augment, cache=args.cache, shard_late=args.shard_late,
            downscale=args.downscale, classes=view["name"])

    # A file that fails to decode mid-run is named by re-reading the examples of the failing step.
    explain = None if synthetic else data.explain_train_error(args.data_dir, trainer.global_batch, args.seed)
    evaluation, explain_val = (None, None) if synthetic else val_evaluation(args, launcher, view)
    # Distributed: one input pipeline per process, split over its replicas
    trainer.fit(launcher.distribute_dataset(dataset_fn, args.batch_size), task, explain_input_error=explain,
                evaluation=evaluation, explain_eval_error=explain_val)

    final_metrics = {} if synthetic else evaluate(args, launcher, trainer, model, view, explain_val)
    # results.json, the export (a copy of the model for TF Serving and predict.py) and --target, in one call
    trainer.finish({
        "preset": args.preset, "model": args.model, "encoder_weights": args.encoder_weights,
        "filters": args.filters, "depth": args.depth,
        "normalization": args.norm, "crop": args.crop, "downscale": args.downscale, "eval_size": args.eval_size,
        "shard_late": args.shard_late,
        "mode": "benchmark" if args.benchmark else ("synthetic" if synthetic else "train"),
        "parameters": model.count_params(), "view": view["name"], "classes": class_names,
        "categories": view.get("groups"), "final_metrics": final_metrics})


if __name__ == "__main__":
    cli.run_main(lambda: main(ARGS))
