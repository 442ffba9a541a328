"""Cassava ResNet50: fine-tune an ImageNet ResNet50 to tell four cassava leaf diseases from healthy leaves.

Trains ResNet50 (ImageNet weights, no top) + global average pooling + Dense 1016 relu + Dense 5
softmax on the 5,656 training photos of TFDS `cassava`, resized to 300x300, with Adam 1e-4 and
32 images per replica for 15 epochs, then evaluates on the 1,889 validation photos. These are the
seed tutorial's model and hyper-parameters. The same script runs under every launcher:

    python recipes/cassava-resnet/train.py --launcher single --data-dir DIR
    python recipes/cassava-resnet/train.py --launcher mirrored --data-dir DIR        # all local GPUs
    python -m tf_recipes.operations.spawn --nproc 2 -- \\
        python recipes/cassava-resnet/train.py --launcher multiworker --data-dir DIR
    horovodrun -np 4 -H localhost:4 python recipes/cassava-resnet/train.py --launcher horovod --data-dir DIR

or all of them through `invoke run cassava-resnet --gpus N --launcher L -- --data-dir DIR`.

Data: TFDS `cassava` prepared once in DIR (`download_cassava.py` on a machine with internet);
`--synthetic` trains on generated images instead, for benchmarks and tests. Weights: `--weights
imagenet` (downloaded by Keras, or already in ~/.keras/models), `none`, or a local weights file.
"""
import os
import warnings
from dataclasses import dataclass

from tf_recipes import cli, user_paths
from tf_recipes.config import RunConfig, data_format_flag, flag, positive_int, rate, recipe_default
from tf_recipes.config import val_fraction_flag

RECIPE = "cassava-resnet"


# ## Configuration
# What a run is: the shared loop's fields (tf_recipes.config.RunConfig) and this recipe's own. Each field is
# also its flag, parsed before TensorFlow is imported, so that --help and a mistyped flag answer at once.

@dataclass(frozen=True)
class Config(RunConfig):
    # The seed tutorial's 15 epochs of Adam at 1e-4. A fine-tuning recipe meant for several GPUs: the rate
    # grows with the global batch (with warm-up) unless --no-scale-lr.
    epochs: int = recipe_default("epochs", 15)
    lr: float = recipe_default("lr", 1e-4)
    scale_lr: bool = recipe_default("scale_lr", True)
    bn_momentum: float = flag(RECIPE, 0.99, "batch normalization's moving-average momentum: "
                              "ResNet50's 0.99 suits fine-tuning; its statistics take hundreds of steps to follow "
                              "weights trained from scratch, for which a short run wants 0.9", type=rate)
    image_size: int = flag(RECIPE, 300, "photos are resized to this square size (ResNet50 needs at "
                           "least 32)", type=positive_int)
    weights: str = flag(RECIPE, "imagenet", "imagenet | none | PATH of a weights file (.h5 or "
                        ".weights.h5)")
    cache_dir: str | None = flag(RECIPE, None, "where the resized training images are cached "
                                 "(default: ~/.cache/tf-recipes/cassava-resnet); node-local scratch or a shared "
                                 "file system")
    data_format: str = data_format_flag("tfds")
    val_fraction: float | None = val_fraction_flag()

    def cache_root(self):
        return self.cache_dir or os.path.join(
            os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tf-recipes", RECIPE)


def parse_args(argv=None) -> Config:
    parser = cli.training_parser(__doc__.split("\n")[0], config=Config)
    config = cli.configuration(parser.parse_args(argv), Config)
    if config.image_size < 32:
        parser.error(f"--image-size {config.image_size} is below ResNet50's minimum of 32")
    if not (config.synthetic or config.cache_dir):  # made on first use; the parser checked a --cache-dir given
        user_paths.exit_if(user_paths.creatable_problem("the decode cache (the default of --cache-dir)",
                                                        config.cache_root()))
    return config


if __name__ == "__main__":
    CONFIG = parse_args()

import h5py  # noqa: E402
import keras  # noqa: E402

import input_pipeline  # noqa: E402
from tf_recipes import export, training  # noqa: E402
from tf_recipes.data import DataError, cannot_download, error_reason  # noqa: E402
from tf_recipes.image_folder import read_image_folder  # noqa: E402
from tf_recipes.launchers import create_launcher  # noqa: E402


# ## Data
# Every photo is decoded and resized once, by one input pipeline, into a cache of uint8 images;
# training batches are gathered from it by the indices of this pipeline's shard (see
# input_pipeline.py). uint8 all the way to the model: a quarter of the bytes of float32.

CASSAVA_CLASSES = ["cbb", "cbsd", "cgm", "cmd", "healthy"]  # TFDS cassava's label names, in label order


def load_train_split(config, launcher):
    if config.synthetic:
        return None, input_pipeline.synthetic_split(512, config.image_size, config.seed)
    if config.data_format == "image-folder":  # the user's photos: same cache, same sharded order
        builder = read_image_folder(config.data_dir, config.val_fraction, config.seed)
    else:
        # Distributed: a job of several processes never downloads
        builder = input_pipeline.cassava_builder(config.data_dir, allow_download=launcher.num_workers == 1)
    # Distributed: every pipeline caches its share of the photos, then waits for the others'
    arrays = input_pipeline.cache_split(builder, "train", config.image_size, config.cache_root(),
                                        launcher.input_shard(config.batch_size), barrier=launcher.barrier,
                                        log=lambda message: print(message, flush=True))  # every pipeline
    return builder, arrays



def make_eval_dataset(builder, config, launcher):
    """This process's share of the validation photos (every process evaluates one share)."""
    if builder is None:
        arrays = input_pipeline.synthetic_split(128, config.image_size, config.seed + 1)
        # Distributed: this process's share of the generated validation photos
        return input_pipeline.arrays_dataset(arrays, 64, launcher.eval_share(len(arrays)))
    if input_pipeline.is_folder(builder):  # cached too: an unreadable val photo is named before training
        # Distributed: every pipeline caches its share of the validation photos, then waits for the others'
        arrays = input_pipeline.cache_split(builder, "validation", config.image_size, config.cache_root(),
                                            launcher.input_shard(config.batch_size), barrier=launcher.barrier)
        # Distributed: this process's share of the validation photos
        return input_pipeline.arrays_dataset(arrays, 64, launcher.eval_share(len(arrays)))
    # Distributed: this process's share of the TFDS validation split
    share = launcher.eval_share(input_pipeline.split_size(builder, "validation"))
    return input_pipeline.make_eval_dataset(builder, "validation", config.image_size, batch_size=64, share=share)


# ## Model
# The ImageNet weights expect caffe-style inputs: BGR, 0..255, ImageNet mean subtracted (the seed
# scaled to [0, 1] instead, which the pretrained filters never saw). That preprocessing is a layer
# of the model, so the pipeline ships uint8, the accelerator does the arithmetic, and the saved
# model cannot be fed the wrong scale. It and the softmax stay float32 under --amp.

IMAGENET_NOTOP = "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"
IMAGENET_URL = f"https://storage.googleapis.com/tensorflow/keras-applications/resnet/{IMAGENET_NOTOP}"
IMAGENET_MD5 = "4d473c1dd8becc155b73f8504c6f6626"  # keras.applications.resnet WEIGHTS_HASHES["resnet50"]


class WeightsError(DataError):
    """Unusable --weights. A DataError, so the shared entry point prints it as one line."""


class ImageNetPreprocessing(keras.layers.Layer):
    """uint8 RGB images -> keras.applications.resnet50.preprocess_input (caffe mode)."""

    def call(self, images):
        return keras.applications.resnet50.preprocess_input(keras.ops.cast(images, "float32"))


def check_weights(weights):
    """Fail before any work when --weights cannot be had: never a download that hangs or retries."""
    if weights == "none":
        return None
    if weights == "imagenet":
        # Where keras.utils.get_file keeps downloads: KERAS_HOME or ~/.keras, else /tmp/.keras.
        homes = (os.environ.get("KERAS_HOME") or os.path.expanduser("~/.keras"), "/tmp/.keras")
        cached = [os.path.join(home, "models", IMAGENET_NOTOP) for home in homes]
        offline = None if any(os.path.isfile(path) for path in cached) else cannot_download()
        if offline:
            raise WeightsError(
                f"--weights imagenet: the ImageNet ResNet50 weights are not in {cached[0]} and {offline} "
                f"to download them. Download {IMAGENET_URL} on a machine with internet and pass "
                "--weights PATH/TO/FILE.h5 (or copy it to that folder), or train from scratch with --weights none")
        return "imagenet"
    what = user_paths.what_is(weights)  # never opened unless a file: h5py would wait on a FIFO
    if what != user_paths.FILE:
        found = "no such file" if what == user_paths.MISSING else f"{what}, not a file"
        raise WeightsError(f"--weights {weights}: {found}; give imagenet, none, or the path of a weights "
                           f"file (the Keras {IMAGENET_NOTOP}, or final.weights.h5 from a run of this recipe)")
    try:  # a truncated or damaged file fails here, in milliseconds, not after the data is cached
        with h5py.File(weights, "r"):
            pass
    except OSError as error:
        raise WeightsError(f"--weights {weights} cannot be read as an HDF5 weights file ({error_reason(error)}); "
                           "copy or download it again, or train from scratch with --weights none") from None
    return weights


def fetch_imagenet_weights(launcher):
    """The chief downloads the weights into the Keras cache while the other processes wait; they
    then find them there (same node or shared home) instead of all writing one file at once."""
    def fetch():
        try:
            keras.utils.get_file(IMAGENET_NOTOP, IMAGENET_URL, cache_subdir="models", file_hash=IMAGENET_MD5)
        except Exception as error:  # a proxy, a truncated download, a wrong hash
            raise WeightsError(f"--weights imagenet: downloading {IMAGENET_URL} failed ({type(error).__name__}: "
                               f"{error}); download it by hand and pass --weights PATH, or use --weights none"
                               ) from None

    if launcher.is_chief:  # Distributed: the chief downloads the weights
        fetch()
    launcher.barrier()  # Distributed: the others wait for the download
    if not launcher.is_chief:  # Distributed: the others find the chief's copy
        fetch()  # nothing to do when the chief's copy is visible here


def build_model(image_size, weights, num_classes=input_pipeline.NUM_CLASSES, bn_momentum=0.99):
    inputs = keras.Input((image_size, image_size, 3), dtype="uint8", name="image")
    x = ImageNetPreprocessing(dtype="float32", name="imagenet_preprocessing")(inputs)
    backbone = keras.applications.ResNet50(include_top=False, weights="imagenet" if weights == "imagenet" else None,
                                           input_shape=(image_size, image_size, 3))
    for layer in backbone.layers:  # --bn-momentum: how fast the moving statistics follow the weights
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = bn_momentum
    x = backbone(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(1016, activation="relu")(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name="cassava_resnet50")
    if weights not in (None, "imagenet"):
        load_weights_file(model, backbone, weights)
    return model


def load_weights_file(model, backbone, path):
    """A backbone file (Keras' ResNet50 notop .h5, or a ResNet50 .weights.h5), else a whole-model file."""
    errors = []
    for target, what in ((backbone, "ResNet50 backbone"), (model, "whole model")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                target.load_weights(path)
            except Exception as error:  # Keras raises ValueError, KeyError or OSError by file and mismatch
                errors.append(f"as the {what}: {type(error).__name__}: {error_reason(error, 200)}")
                continue
        # Keras only warns when it skips layers, which then keep their random initial weights.
        skipped = [str(w.message) for w in caught if "Skipping" in str(w.message)]
        if skipped:
            errors.append(f"as the {what}: {len(skipped)} layer groups were not in the file")
            continue
        print(f"--weights: loaded {path} into the {what}", flush=True)
        return
    raise WeightsError(f"--weights {path} is not a weights file this model can load ({'; '.join(errors)}). "
                       f"Give the Keras {IMAGENET_NOTOP}, a final.weights.h5 of this recipe, or --weights none")


TASK = training.classification_task()  # cross-entropy loss, accuracy metric


# ## Training
# The same lines under every launcher, as in mnist-cnn; only the weights are fetched first, by the
# chief, while the other processes wait.

def main(config: Config):
    # Distributed: the launcher (--launcher), first: it may split the CPU into replicas before TF starts
    launcher = create_launcher(config.launcher, config.cpu_replicas, config.collective, config.join_timeout)
    keras.utils.set_random_seed(config.seed)
    training.configure_precision(config.amp)
    weights = check_weights(config.weights)  # before the data: a bad --weights fails in seconds
    if weights == "imagenet":
        fetch_imagenet_weights(launcher)

    builder, train_arrays = load_train_split(config, launcher)
    # The user's classes come from their folders; the model, results.json and the export follow them.
    class_names = builder.class_names if input_pipeline.is_folder(builder) else CASSAVA_CLASSES
    # The steps of the run, for this launch's global batch (per-replica batch x replicas)
    plan = config.plan(len(train_arrays), launcher.num_replicas)
    with launcher.scope():  # Distributed: model and optimizer variables on every replica
        model = build_model(config.image_size, weights, len(class_names), config.bn_momentum)
        # Distributed: with --scale-lr, the rate times the replicas, reached over --lr-warmup-steps
        optimizer = keras.optimizers.Adam(training.learning_rate(config, plan))
    # What finish() exports, checked now: RGB images at --image-size in, a probability per class out
    exported = export.ExportSpec(task=export.CLASSIFICATION, class_names=class_names, channels=3,
                                 image_size=(config.image_size, config.image_size),
                                 build=lambda: build_model(config.image_size, None, len(class_names)))
    # --resume: the Trainer restores the latest checkpoint, and the data goes on from its step
    trainer = training.Trainer(launcher, RECIPE, config, plan, model=model, optimizer=optimizer, task=TASK,
                               export=exported)

    dataset = launcher.distribute_dataset(  # Distributed: one input pipeline per process, split over its replicas
        lambda shard: input_pipeline.make_train_dataset(train_arrays, shard, plan.total_steps, config.seed,
                                                        trainer.start_step),
        config.batch_size)
    # fit() also averages the batch-norm moving statistics over the replicas and checks them.
    trainer.fit(dataset, evaluation=lambda: make_eval_dataset(builder, config, launcher))

    validation = trainer.evaluate()  # the validation split at the step training ended
    training.log(launcher, f"validation: loss {validation['loss']:.4f}  accuracy {validation['accuracy']:.4f}")
    data = "synthetic" if config.synthetic else {"tfds": "cassava"}.get(config.data_format, config.data_format)
    # results.json, the export (a copy of the model for TF Serving and predict.py) and --target, in one call
    trainer.finish({"final_metrics": {"validation": validation}, "data": data, "image_size": config.image_size,
                    "weights": config.weights, "classes": class_names})


if __name__ == "__main__":
    cli.run_main(lambda: main(CONFIG))
