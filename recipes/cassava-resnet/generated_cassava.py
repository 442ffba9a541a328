"""Write a real, prepared TFDS `cassava` directory filled with generated leaf photos.

    python recipes/cassava-resnet/generated_cassava.py DATA_DIR --train 64 --validation 16 --test 16

The result is what `download_and_prepare` leaves on a login node (DATA_DIR/cassava/0.1.0/ with
dataset_info.json and TFRecord shards holding JPEG bytes), so `tfds.builder("cassava",
data_dir=DATA_DIR)` and `tfds.load` read it exactly as they read the real dataset. It is built by
the real TFDS cassava builder with one change: the examples come from JPEG files written here
instead of the 1.3 GB download, which no test machine can reach.

The photos are JPEGs of the real ones' sizes (500x375 up to 800x600 by default) with smooth
colour gradients and leaf-like texture, so that decoding costs about what a real photo costs.
Each class gets its own hue, which makes the labels learnable.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import tempfile

import numpy as np

from tf_recipes import user_paths
from tf_recipes.cli import non_negative_int, positive_int

LABELS = ("cbb", "cbsd", "cgm", "cmd", "healthy")
PHOTO_SIZES = ((500, 375), (640, 480), (800, 600), (600, 800), (375, 500))  # width, height
HUES = np.array([[90, 140, 40], [150, 160, 50], [60, 110, 60], [170, 150, 90], [40, 150, 50]], np.float32)


def leaf_photo(rng: np.random.Generator, label: int, width: int, height: int) -> np.ndarray:
    """An RGB uint8 image: a class-coloured gradient, blotches and fine noise (JPEG-realistic)."""
    import tensorflow as tf  # here, not at the top: main() checks its flags before TensorFlow loads

    coarse = rng.normal(0, 40, (1, max(height // 32, 2), max(width // 32, 2), 3)).astype(np.float32)
    coarse = tf.image.resize(coarse, (height, width), method="bicubic")[0].numpy()
    rows = np.linspace(-1, 1, height, dtype=np.float32)[:, None, None]
    image = HUES[label] * (1.0 + 0.3 * rows) + coarse + rng.normal(0, 12, (height, width, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def write_jpegs(source: pathlib.Path, counts: dict, sizes, seed: int, quality: int) -> None:
    """The layout the cassava builder reads: cassavaleafdata/SPLIT/LABEL/SPLIT-LABEL-N.jpg."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    for split, count in counts.items():
        for index in range(count):
            label = index % len(LABELS)
            width, height = sizes[rng.integers(len(sizes))]
            folder = source / "cassavaleafdata" / split / LABELS[label]
            folder.mkdir(parents=True, exist_ok=True)
            jpeg = tf.io.encode_jpeg(leaf_photo(rng, label, width, height), quality=quality)
            (folder / f"{split}-{LABELS[label]}-{index}.jpg").write_bytes(jpeg.numpy())


def local_cassava_builder(source: pathlib.Path, data_dir: str):
    """The real cassava builder, reading its split folders from `source` instead of downloading."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.image_classification import cassava

    class LocalCassava(cassava.Cassava, skip_registration=True):
        name = "cassava"

        def _split_generators(self, dl_manager):
            root = source / "cassavaleafdata"
            return [tfds.core.SplitGenerator(name=split, gen_kwargs={"datapath": str(root / split)})
                    for split in ("train", "test", "validation") if (root / split).is_dir()]

    return LocalCassava(data_dir=data_dir)


def write_prepared_cassava(data_dir, train: int = 64, validation: int = 16, test: int = 16,
                           sizes=PHOTO_SIZES, seed: int = 0, quality: int = 90) -> str:
    """Prepare DATA_DIR/cassava/0.1.0 from generated photos; returns the dataset's folder."""
    counts = {name: count for name, count in (("train", train), ("validation", validation), ("test", test)) if count}
    with tempfile.TemporaryDirectory(prefix="cassava-source-") as scratch:
        scratch = pathlib.Path(scratch)
        write_jpegs(scratch, counts, sizes, seed, quality)
        builder = local_cassava_builder(scratch, str(data_dir))
        builder.download_and_prepare(download_dir=str(scratch / "downloads"))
    shutil.rmtree(os.path.join(str(data_dir), "downloads"), ignore_errors=True)
    return builder.data_dir


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data_dir", help="TFDS data dir to write DATA_DIR/cassava/0.1.0 into")
    parser.add_argument("--train", type=non_negative_int, default=64)
    parser.add_argument("--validation", type=non_negative_int, default=16)
    parser.add_argument("--test", type=non_negative_int, default=16)
    parser.add_argument("--size", type=positive_int, nargs=2, metavar=("WIDTH", "HEIGHT"), default=None,
                        help="one size for every photo (default: the real photos' range of sizes)")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    args = parser.parse_args()
    if not args.train + args.validation + args.test:
        parser.error("--train, --validation and --test are all 0; give at least one photo")
    user_paths.exit_if(user_paths.flags_problem({}, {"DATA_DIR": args.data_dir}))
    sizes = [tuple(args.size)] if args.size else PHOTO_SIZES
    print(write_prepared_cassava(args.data_dir, args.train, args.validation, args.test, sizes, args.seed))


if __name__ == "__main__":
    main()
