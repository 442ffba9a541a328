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

`--preset full` (default) is mmsegmentation's UNet-S5-D16 on Cityscapes
(fcn_unet_s5-d16_4x4_512x1024_160k_cityscapes, 69.10% class mean IoU), parameter for parameter: 160,000
iterations of 16 crops of 512x1024, SGD on a poly rate, synchronized batch norm, an auxiliary head; `--preset
resnet50` a U-Net decoder on an ImageNet ResNet50, trained with Adam; `--preset cpu` a smaller model on whole
scenes shrunk to about 128 rows (128x256 for Cityscapes), scored at full size, for a CPU; `--preset tiny` one on
small crops, which the test suite trains. `--benchmark` trains on generated tensors of the preset's size for a
fixed number of steps, so that it measures compute without the input pipeline.
"""
import dataclasses
import math
import os
from dataclasses import dataclass

from tf_recipes import cli
from tf_recipes.config import RunConfig, flag, non_negative_float, non_negative_int, positive_int, rate
from tf_recipes.data import DataError

RECIPE = "cityscapes-unet"


# ## Configuration
# What a run is: the shared loop's fields (tf_recipes.config.RunConfig) and this recipe's own, each also its
# flag, parsed before TensorFlow is imported so that --help and a mistyped flag answer at once. A preset is a
# whole configuration; flags given override any of its fields.

NORMALIZATIONS = ("none", "group", "batch")  # model.NORMALIZATIONS, without importing Keras first
MODELS = ("unet-s5-d16", "unet", "resnet50-unet")  # model.MODELS, without importing Keras first
IMAGENET_FILE = "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"
AUTO, SEEN_ROWS = "auto", 128  # --downscale auto: the scenes shrunk by a power of two to about 128 rows
FULL_SIZE = (1024, 2048)


def downscale(text):
    return text if text == AUTO else positive_int(text)


def encoder_weights(text):
    if text in ("imagenet", "none") or os.path.isfile(text):
        return text
    raise ValueError(f"{text!r} is neither imagenet, none nor a file of ResNet50's weights (e.g. {IMAGENET_FILE}, "
                     "downloaded elsewhere)")


def size(text):
    try:
        height, width = (int(side) for side in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"{text!r} is not HEIGHTxWIDTH, e.g. 512x1024") from None
    if height < 1 or width < 1:
        raise ValueError(f"{text!r}: both sides must be at least 1")
    return height, width


def share(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise ValueError(f"{text!r} is not a share above 0 and at most 1, e.g. 0.75")
    return value


def scale_range(text):
    try:
        low, high = (float(part) for part in text.split(":"))
    except ValueError:
        raise ValueError(f"{text!r} is not MIN:MAX, e.g. 0.75:1.25") from None
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        raise ValueError(f"{text!r}: need finite 0 < MIN <= MAX, e.g. 0.75:1.25")
    return low, high


@dataclass(frozen=True)
class Config(RunConfig):
    """A run of this recipe. Its own fields default to the full preset's."""

    # tiny (small crops of a small model) is what the test suite trains: accepted, not offered in --help
    preset: str = flag(RECIPE, "full", "full: mmsegmentation's UNet-S5-D16 on Cityscapes, for 8 GPUs (README, "
                       "\"The full preset\"); resnet50: a U-Net on an ImageNet ResNet50; cpu: a smaller model on "
                       "downscaled whole scenes, for a CPU", choices=("cpu", "full", "resnet50", "tiny"),
                       metavar="{full,resnet50,cpu}")
    classes: str | None = flag(RECIPE, None, "what to train on Cityscapes data: the 19 evaluation classes "
                               "(default) or the 7 categories; both ignore every other label. Your own data: its "
                               "classes", choices=("classes", "categories"))
    model: str = flag(RECIPE, "unet-s5-d16", "unet-s5-d16: mmsegmentation's UNet with its heads (--filters, "
                      "--depth); unet: a plain UNet (--filters, --depth); resnet50-unet: a U-Net decoder with a "
                      "context module on ResNet50", choices=MODELS)
    encoder_weights: str | None = flag(RECIPE, None, "resnet50-unet's encoder: imagenet (Keras downloads "
                                       f"them), a file of ResNet50's weights ({IMAGENET_FILE}, for a machine that "
                                       "cannot download), or none: from scratch (--benchmark starts from scratch)",
                                       type=encoder_weights)
    iterations: int | None = flag(RECIPE, 160_000, "train this many global steps of --reference-batch, the "
                                  "rate's schedule spanning them (the presets without it count --epochs)",
                                  type=positive_int)
    reference_batch: int = flag(RECIPE, 16, "the global batch that --iterations, --lr, --lr-warmup-steps and "
                                "--checkpoint-every are given at; a launch of another global batch G trains the "
                                "same samples: the iterations, the warm-up and the checkpoints' interval times N/G, "
                                "the rate times G/N (linear scaling); 0: as given, at any global batch",
                                type=non_negative_int, metavar="N")
    filters: int = flag(RECIPE, 64, "filters of the first level (doubles per level)", type=positive_int)
    depth: int = flag(RECIPE, 4, "down-sampling levels", type=positive_int)
    dropout: float = flag(RECIPE, 0.1, "dropout: of whole channels before each head's classifier (unet-s5-d16), "
                          "after every conv block (the others)", type=rate)
    loss: str = flag(RECIPE, "cross-entropy", "cross-entropy: over every pixel, ignored ones adding 0, as "
                     "mmsegmentation averages it (with the auxiliary head's at weight 0.4); cross-entropy-dice: "
                     "over the pixels not ignored, plus 1 - the soft Dice score", choices=("cross-entropy",
                                                                                           "cross-entropy-dice"))
    optimizer: str = flag(RECIPE, "sgd", "sgd: PyTorch's SGD (momentum over gradients, --weight-decay coupled); "
                          "adam: Keras' Adam", choices=("sgd", "adam"))
    momentum: float = flag(RECIPE, 0.9, "sgd's momentum", type=rate)
    weight_decay: float = flag(RECIPE, 5e-4, "sgd: added to the gradient times each weight, as PyTorch's SGD does "
                               "(an L2 term of half of it on the loss)", type=non_negative_float)
    norm: str = flag(RECIPE, "batch", "normalisation after each convolution: none (the same in training and "
                     "inference, on crops and whole images), group (per image, over its whole extent), batch (per "
                     "replica's batch; moving statistics in inference)", choices=NORMALIZATIONS)
    downscale: int | str = flag(RECIPE, 1, "N or auto: the model sees the scenes at 1/N of their prepared size, in "
                                "training and evaluation, and its prediction is scored at full size; auto: the "
                                f"largest power of two that leaves {SEEN_ROWS} rows or more", type=downscale)
    crop: tuple[int, int] | None = flag(RECIPE, (512, 1024), "training crop HEIGHTxWIDTH, at the --downscale size "
                                        "(the cpu preset trains whole scenes)", type=size)
    scale: tuple[float, float] = flag(RECIPE, (0.5, 2.0), "random zoom range MIN:MAX", type=scale_range)
    cat_max_ratio: float = flag(RECIPE, 0.75, "redraw a crop (up to 10 times) while one class covers this share of "
                                "its labelled pixels or more, or it holds one class only, as mmsegmentation's "
                                "RandomCrop; 1: never", type=share)
    photometric: bool = flag(RECIPE, True, "random brightness, contrast, saturation and hue, as mmsegmentation's "
                             "PhotoMetricDistortion", action="negatable")
    augment: bool = flag(RECIPE, True, "no zoom, crop position or flip augmentation", names=("--no-augment",),
                         action="store_false")
    cache: bool = flag(RECIPE, False, "decode the training scenes once, at the --downscale size, and train from "
                       "them: in each process's memory, or with --cache-dir in files every process of a node maps",
                       action="negatable")
    cache_dir: str | None = flag(RECIPE, None, "with --cache: keep the decoded scenes in files here, written once "
                                 "per node and mapped by each of its processes (node-local scratch, or a shared file "
                                 "system); about 8 MiB a 1024x2048 scene")
    shard_late: bool = flag(RECIPE, False, "decode everything, then shard (the slow variant, for comparison)",
                            action="store_true")
    eval_size: tuple[int, int] | None = flag(RECIPE, None, "resize val images to HEIGHTxWIDTH for the model; the "
                                             "prediction is resized back to the categories, which are never "
                                             "resized (default: 1/--downscale of the prepared size)", type=size)
    eval_batch_size: int = flag(RECIPE, 2, "val images per evaluation batch", type=positive_int)
    predict_dir: str | None = flag(RECIPE, None, "write the predictions for the val images here "
                                   "(--predict-format)")
    predict_format: str = flag(RECIPE, "colour", "colour: image | prediction | truth PNGs of --predict-count "
                               "scenes; labelids: every val scene's prediction as Cityscapes label ids at full size, "
                               "CITY/ID_pred_labelIds.png, as cityscapesScripts' csEvalPixelLevelSemanticLabeling "
                               "reads them", choices=("colour", "labelids"))
    predict_count: int = flag(RECIPE, 8, "colour PNGs to write", type=positive_int)
    benchmark: bool = flag(RECIPE, False, "generated full-size tensors, --max-steps (default 20) after "
                           "--warmup-steps; no eval", action="store_true")


# mmsegmentation's fcn_unet_s5-d16_4x4_512x1024_160k_cityscapes, parameter for parameter (README, "The full
# preset"): its model, heads and losses (model.py), SGD at 0.01 with momentum 0.9 and weight decay 5e-4 coupled,
# a poly(0.9) rate down to 1e-4 without warm-up, 160,000 iterations of global batch 16 (2 per GPU on 8 GPUs; the
# published run had 4 on each of 4), crops of 512x1024 of scenes zoomed by 0.5 to 2.0 with its class ratio rule,
# flips and photometric distortion; evaluation and a checkpoint every 16,000 iterations, as published, and a
# checkpoint every 30 minutes besides, the newest 2 kept. A full-resolution step takes far longer than the host's
# ~0.5 ms per call: one step per call keeps a stop signal answered within one step.
FULL = Config(batch_size=2, lr=0.01, lr_schedule="poly", lr_end=1e-4, lr_warmup_steps=0, steps_per_loop=1,
              checkpoint_every=16_000, checkpoint_minutes=30.0, eval_every=16_000)
# Today's ImageNet ResNet50 model: a U-Net decoder with a context module on ResNet50, Adam on a cosine rate,
# 80,000 iterations of 16 crops (its nearest published configuration: README, "The resnet50 preset")
RESNET50 = dataclasses.replace(
    FULL, preset="resnet50", model="resnet50-unet", encoder_weights="imagenet", filters=32, depth=5, dropout=0.0,
    loss="cross-entropy-dice", optimizer="adam", weight_decay=0.0, cat_max_ratio=1.0, photometric=False,
    iterations=80_000, lr=1e-4, lr_schedule="cosine", lr_end=0.0, lr_warmup_steps=1000, checkpoint_every=8000,
    eval_every=None)
PRESETS = {
    "full": FULL,
    "resnet50": RESNET50,
    # Whole scenes about 128 rows high (1/8 of Cityscapes' 1024x2048: 128x256), kept decoded in memory: 600
    # steps of 8 scenes for 80 training scenes, about 8 minutes on the 2-core CI machine, evaluation included
    # (the README's Results and Model and training say what each choice measured).
    "cpu": dataclasses.replace(RESNET50, preset="cpu", model="unet", encoder_weights=None, crop=None, downscale=AUTO,
                               scale=(1.0, 1.0), cache=True, norm="group", filters=16, depth=4, batch_size=8,
                               iterations=None, epochs=60, lr=2e-3, lr_warmup_steps=20,
                               checkpoint_every=0, checkpoint_minutes=None),
    "tiny": dataclasses.replace(RESNET50, preset="tiny", model="unet", encoder_weights=None, crop=(64, 128),
                                scale=(0.75, 1.25), norm="none", filters=8, depth=2, iterations=None, epochs=50,
                                lr=1e-3, lr_schedule="constant", lr_warmup_steps=100, checkpoint_every=0,
                                checkpoint_minutes=None),
}
# What a preset sets: these flags' values, when given, override the preset's
PRESET_FIELDS = sorted({name for preset in PRESETS.values() for name, value in vars(preset).items()
                        if value != getattr(Config(), name)} - {"preset"} | {"epochs"})


def parse_args(argv=None) -> Config:
    parser = cli.training_parser(__doc__.split("\n")[0], config=Config, metrics=("mean_iou", "category_mean_iou"),
                                 **dict.fromkeys(PRESET_FIELDS))  # None: not given, the preset's value
    for action in parser._actions:  # --help: what each preset sets
        if action.dest in PRESET_FIELDS and action.help:
            shown = ", ".join(f"{name} {getattr(PRESETS[name], action.dest)}" for name in ("full", "resnet50",
                                                                                          "cpu"))
            action.help += f" (default: the preset's; {shown})"
    group = parser.groups[RECIPE]
    group.add_argument("--batch-norm", dest="norm", action="store_const", const="batch", help="same as --norm batch")
    group.add_argument("--no-batch-norm", dest="norm", action="store_const", const="none", help="same as --norm none")
    args = parser.parse_args(argv)
    preset = PRESETS[args.preset]
    given = {name: value for name, value in vars(cli.configuration(args, Config)).items()
             if value is not None or name not in PRESET_FIELDS}
    if args.epochs is not None and args.iterations is None:
        given["iterations"] = None  # --epochs given: the preset's iterations give way to it
    config = dataclasses.replace(preset, **given)
    if config.encoder_weights == "none":
        config = dataclasses.replace(config, encoder_weights=None)
    if config.benchmark:
        config = dataclasses.replace(config, max_steps=config.max_steps or 20)
    multiple = 2 ** config.depth
    for name, value in (("--crop", config.crop), ("--eval-size", config.eval_size)):
        if value and (value[0] % multiple or value[1] % multiple):
            parser.error(f"{name} {value[0]}x{value[1]}: both sides must be multiples of {multiple} (2**depth)")
    return config


# ## The plan
# What the data decides, resolved once by a pure function before anything is built.

def downscale_for(size, depth: int) -> int:
    """--downscale auto: the largest power of two that divides both sides and leaves at least SEEN_ROWS
    rows, with sides the UNet of `depth` takes (multiples of 2**depth); 1 when none does."""
    best, factor = 1, 2
    while size[0] // factor >= SEEN_ROWS and not (size[0] % factor or size[1] % factor):
        if not any(side // factor % 2 ** depth for side in size):
            best = factor
        factor *= 2
    return best


def resolve(config: Config, size, num_examples: int, replicas: int, synthetic: bool = False) -> Config:
    """The run's configuration for scenes of `size` (HEIGHTxWIDTH as prepared), `num_examples` of them, on
    `replicas` replicas: --downscale auto as its number, the size the model sees val images at, and
    --iterations (the full preset's schedule, in iterations as published recipes give it) for this launch's
    global batch, by the rule of --reference-batch, as --max-steps at them and the epochs that hold them,
    which the rate's schedule spans. One line when the sizes do not fit."""
    factor = downscale_for(size, config.depth) if config.downscale == AUTO else config.downscale
    changes = {"downscale": factor}
    if not synthetic:
        if any(side % factor for side in size):
            raise DataError(f"the images in {config.data_dir} are {size[0]}x{size[1]}, which --downscale {factor} "
                            "does not divide; choose a --downscale that divides both sides, or prepare them with "
                            "--size HxW")
        # The size the model sees val images at; the prediction is scored at `size`
        eval_size = changes["eval_size"] = config.eval_size or (size[0] // factor, size[1] // factor)
        if any(side % 2 ** config.depth for side in eval_size):  # the UNet's skips need this
            seen = f", seen at {eval_size[0]}x{eval_size[1]}" if tuple(eval_size) != tuple(size) else ""
            raise DataError(f"the images in {config.data_dir} are {size[0]}x{size[1]}{seen}; the UNet of --depth "
                            f"{config.depth} needs sides that are multiples of {2 ** config.depth}: prepare them "
                            "with --size HxW, or pass --eval-size and --crop")
    if config.iterations:
        global_batch, reference = config.batch_size * replicas, config.reference_batch or None
        scale = global_batch / (reference or global_batch)  # the same samples at any global batch
        iterations = max(1, round(config.iterations / scale))
        steps_per_epoch = max(1, num_examples // global_batch)
        changes.update(iterations=iterations, lr=config.lr * scale, lr_end=config.lr_end * scale,
                       epochs=-(-iterations // steps_per_epoch),
                       lr_warmup_steps=round(config.lr_warmup_steps / scale),
                       checkpoint_every=round(config.checkpoint_every / scale),
                       eval_every=config.eval_every and max(1, round(config.eval_every / scale)),
                       max_steps=min(config.max_steps or iterations, iterations))
    return dataclasses.replace(config, **changes)


if __name__ == "__main__":
    CONFIG = parse_args()

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import data  # noqa: E402
from tf_recipes import export, training  # noqa: E402
from tf_recipes.launchers import create_launcher  # noqa: E402
import layout  # noqa: E402
from labels import cityscapes_views  # noqa: E402
import model as model_lib  # noqa: E402
from model import at_truth_size, confusion_sums, prediction, summarize, truth_sums  # noqa: E402


def schedule_line(asked: Config, resolved: Config, plan) -> str:
    """What the run will train, said in its first lines: iterations, samples, epochs and rate (`plan`: the
    resolved configuration's), and how a launch of another global batch than --reference-batch changed them."""
    samples = plan.total_steps * plan.global_batch
    line = (f"schedule: {plan.total_steps:,} iterations of global batch {plan.global_batch}: {samples:,} samples, "
            f"{samples / plan.num_examples:.1f} epochs of {plan.num_examples:,} examples; rate {resolved.lr:g} "
            f"({resolved.optimizer}, {resolved.lr_schedule}, {resolved.lr_warmup_steps:,} warm-up iterations)")
    if asked.iterations and resolved.iterations != asked.iterations:
        line += (f"; {asked.iterations:,} iterations at rate {asked.lr:g} are given at global batch "
                 f"{asked.reference_batch} (--reference-batch): the same samples, the rate scaled linearly")
    return line


# ## Data
# Prepared PNGs, sharded by file before any read (data.py); --benchmark and --synthetic feed one
# generated batch over and over, so that the step time is compute only.

def describe_data(config, launcher):
    """(training examples, the view trained (labels.py: class names, colours, ...), image size
    HEIGHTxWIDTH as prepared) of this run: the prepared folder's (Cityscapes' 19 classes or 7 categories, or
    the user's classes of prepare_data.py --format pairs), or, for generated data, Cityscapes'."""
    if config.benchmark or config.synthetic:
        # Distributed: generated examples for the steps of the global batch (per-replica batch x replicas)
        num_examples = (config.max_steps or 20) * config.batch_size * launcher.num_replicas
        return num_examples, {**cityscapes_views()[config.classes or "classes"], "name": config.classes or "classes"}, \
            FULL_SIZE
    if not config.data_dir:
        raise DataError("--data-dir is required: the folder written by "
                        "`python recipes/cityscapes-unet/prepare_data.py --source CITYSCAPES --out DIR` "
                        "(or use --benchmark for generated data)")
    num_examples = data.num_examples(config.data_dir, "train")
    view = data.view(config.data_dir, config.classes)
    if config.predict_dir and config.predict_format == "labelids" and "label_ids" not in view:
        raise DataError(f"--predict-format labelids writes Cityscapes label ids, and the data in {config.data_dir} "
                        "has its own classes; use --predict-format colour")
    return num_examples, view, data.image_size(config.data_dir)


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

def build_optimizer(config, rate):
    if config.optimizer == "sgd":  # as the published configuration: PyTorch's SGD, weight decay coupled
        return model_lib.CoupledSGD(rate, config.momentum, config.weight_decay)
    return keras.optimizers.Adam(rate)


def build_model(config, num_classes, encoder_weights=None):
    try:
        return model_lib.build_model(config.model, num_classes, config.filters, config.depth, config.dropout,
                                     config.norm, encoder_weights)
    except ValueError as error:  # the encoder's weights could not be had: one line, and what to pass instead
        raise DataError(f"--encoder-weights {encoder_weights}: {error}") from None


def task_for(view, loss="cross-entropy"):
    loss_fn = model_lib.cross_entropy if loss == "cross-entropy" else model_lib.cross_entropy_dice
    return training.Task(loss_fn=loss_fn, metric_sums=confusion_sums,
                         summarize=summarize(view.get("group_of")), baseline_sums=truth_sums)


# ## Training
# The same lines under every launcher, as in mnist-cnn; the mean IoU on val and the prediction PNGs
# come after training.

def val_evaluation(config, launcher, view):
    """This process's share of the val images (as Trainer.fit's `evaluation` takes it), and the
    one line that names a val file that fails to read."""
    # Distributed: this process's share of the val images
    # (every process evaluates its own share; the sums are added up over processes)
    share = launcher.eval_share(data.num_examples(config.data_dir, "val"))
    return (lambda: data.make_eval_dataset(config.data_dir, "val", batch_size=config.eval_batch_size,
                                           size=config.eval_size, share=share, classes=view["name"]),
            lambda: data.bad_example_message(config.data_dir, "val", range(share.start, share.stop),
                                             "read for evaluation"))


def evaluate(config, launcher, trainer, model, view, explain):
    """Class and category IoU on the val images at the step training ended, and --predict-dir's PNGs:
    results.json's final_metrics."""
    val = trainer.evaluate(explain_input_error=explain)
    category = f"  category mean IoU {val['category_mean_iou']:.4f}" if "category_mean_iou" in val else ""
    training.log(launcher, f"val: loss {val['loss']:.4f}  mean IoU {val['mean_iou']:.4f}{category}")
    if config.predict_dir and launcher.is_chief:  # Distributed: the chief writes the prediction PNGs
        write = write_label_ids if config.predict_format == "labelids" else write_colours
        written = write(model, config.data_dir, config.predict_dir, config.predict_count, config.eval_size, view)
        training.log(launcher, f"wrote {written} prediction PNGs to {config.predict_dir}")
    return {"val": val}


def predictions(model, data_dir, eval_size, view):
    """(example id, image, truth, predicted class) of every val scene, predicted at full size: the
    probabilities resized to the truth, then the argmax."""
    examples = data.read_index(data_dir, "val")["examples"]
    scenes = data.make_eval_dataset(data_dir, "val", batch_size=1, size=eval_size, classes=view["name"])
    for example_id, (images, truth) in zip(examples, scenes, strict=True):
        probabilities = prediction(model(images, training=False))
        yield example_id, images[0], truth[0], tf.argmax(at_truth_size(truth, probabilities), -1)[0]


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


def main(config: Config):
    # Distributed: the launcher (--launcher), first: it may split the CPU into replicas before TF starts
    launcher = create_launcher(config.launcher, config.cpu_replicas, config.collective, config.join_timeout)
    keras.utils.set_random_seed(config.seed)
    training.configure_precision(config.amp)

    synthetic = config.benchmark or config.synthetic
    num_examples, view, prepared = describe_data(config, launcher)
    class_names, task = view["names"], task_for(view, config.loss)
    # The plan: what the data and the launch decide (--downscale auto, the val size, --iterations as steps)
    asked, config = config, resolve(config, prepared, num_examples, launcher.num_replicas, synthetic)
    plan = config.plan(num_examples, launcher.num_replicas)
    if config.iterations:  # the rate's schedule spans the iterations, not the epochs that hold them
        plan = dataclasses.replace(plan, planned_steps=config.iterations)
    training.log(launcher, schedule_line(asked, config, plan))
    seen = (prepared[0] // config.downscale, prepared[1] // config.downscale)
    size = (config.crop or seen) if synthetic else prepared  # what a generated batch holds; what is scored
    with launcher.scope():  # Distributed: model and optimizer variables on every replica
        # --benchmark measures compute on generated tensors: the encoder's weights do not change it
        model = build_model(config, len(class_names), None if config.benchmark else config.encoder_weights)
        # Distributed: with --scale-lr, the rate times the replicas, reached over --lr-warmup-steps
        optimizer = build_optimizer(config, training.learning_rate(config, plan))
    # What finish() exports, checked now: RGB scenes in, at --eval-size; a class a pixel out, at the data's size
    exported = export.ExportSpec(task=export.SEGMENTATION, class_names=class_names, palette=view["colours"],
                                 image_size=config.eval_size or size, output_size=size, antialias=True, channels=3,
                                 build=lambda: build_model(config, len(class_names)))
    # --resume: the Trainer restores the latest checkpoint, and the data goes on from its step
    trainer = training.Trainer(launcher, RECIPE, config, plan, model=model, optimizer=optimizer, task=task,
                               export=exported)

    scenes = None
    if config.cache and config.cache_dir and not synthetic:
        # Distributed: each pipeline decodes its share of the scenes, then waits for the others' (once per node)
        scenes = data.cached_train_scenes(config.data_dir, launcher.input_shard(config.batch_size), config.cache_dir,
                                          downscale=config.downscale, scale=config.scale, augment=config.augment,
                                          classes=view["name"], barrier=launcher.barrier,
                                          log=lambda line: print(line, flush=True))  # one per node

    def dataset_fn(shard):
        if synthetic:
            return synthetic_dataset(shard, *size, plan.total_steps - trainer.start_step, config.seed,
                                     len(class_names))
        return data.make_train_dataset(
            config.data_dir, shard, plan.total_steps, config.seed, trainer.start_step, crop=config.crop,
            scale=config.scale, augment=config.augment, cache=config.cache, shard_late=config.shard_late,
            cat_max_ratio=config.cat_max_ratio, photometric=config.photometric, scenes=scenes,
            downscale=config.downscale, classes=view["name"])

    # A file that fails to decode mid-run is named by re-reading the examples of the failing step.
    explain = None if synthetic else data.explain_train_error(config.data_dir, plan.global_batch, config.seed)
    evaluation, explain_val = (None, None) if synthetic else val_evaluation(config, launcher, view)
    # Distributed: one input pipeline per process, split over its replicas
    trainer.fit(launcher.distribute_dataset(dataset_fn, config.batch_size), explain_input_error=explain,
                evaluation=evaluation, explain_eval_error=explain_val)

    final_metrics = {} if synthetic else evaluate(config, launcher, trainer, model, view, explain_val)
    # results.json, the export (a copy of the model for TF Serving and predict.py) and --target, in one call
    trainer.finish({
        "preset": config.preset, "model": config.model, "encoder_weights": config.encoder_weights,
        "filters": config.filters, "depth": config.depth, "loss": config.loss, "optimizer": config.optimizer,
        "normalization": config.norm, "crop": config.crop, "downscale": config.downscale,
        "eval_size": config.eval_size, "shard_late": config.shard_late,
        "mode": "benchmark" if config.benchmark else ("synthetic" if synthetic else "train"),
        "parameters": model.count_params(), "view": view["name"], "classes": class_names,
        "categories": view.get("groups"), "final_metrics": final_metrics})


if __name__ == "__main__":
    cli.run_main(lambda: main(CONFIG))
