"""Download and prepare TFDS `cassava` once, on a machine with internet (a cluster's login node).

    python recipes/cassava-resnet/download_cassava.py --data-dir /shared/tensorflow_datasets

Downloads the 1.3 GB archive and writes DIR/cassava/0.1.0 (TFRecord shards with the original JPEG
bytes: 5,656 train, 1,889 validation, 1,885 test). Training jobs then read it with
`--data-dir DIR` and never touch the network. Running it again on a prepared DIR does nothing.
"""
import argparse
import os
import sys

from tf_recipes import user_paths  # noqa: E402
from tf_recipes.data import DataError  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="TFDS data dir to prepare cassava in")
    args = parser.parse_args()
    user_paths.exit_if(user_paths.flags_problem({}, {"--data-dir": args.data_dir}))
    os.makedirs(args.data_dir, exist_ok=True)
    from input_pipeline import cassava_builder  # loads TensorFlow and TFDS: after the checks

    try:
        builder = cassava_builder(args.data_dir)
    except DataError as error:
        sys.exit(f"error: {error}")
    splits = ", ".join(f"{name} {split.num_examples}" for name, split in sorted(builder.info.splits.items()))
    print(f"cassava is prepared in {builder.data_dir} ({splits}); train with --data-dir {args.data_dir}")


if __name__ == "__main__":
    main()
