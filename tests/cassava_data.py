"""Generated cassava-resnet data for the recipe's tests and its launcher tests: a prepared TFDS
`cassava` directory of small generated photos, and a ResNet50 backbone weights file.

tests/recipes/cassava/conftest.py makes the fixtures available to the recipe's tests, and
tests/integration/conftest.py to the launcher tests."""
import pathlib

import pytest

from helpers import recipe_module

# Small photos keep the tests quick; their sizes differ, as the real ones do.
TEST_PHOTO_SIZES = ((96, 72), (120, 90), (72, 96))
SPLITS = {"train": 24, "validation": 7, "test": 3}


def prepared_cassava(tmp_path_factory) -> pathlib.Path:
    data_dir = tmp_path_factory.mktemp("tfds")
    generated_cassava = recipe_module("cassava-resnet", "generated_cassava")
    generated_cassava.write_prepared_cassava(data_dir, **SPLITS, sizes=TEST_PHOTO_SIZES, seed=3)
    return data_dir


@pytest.fixture(scope="module")
def cassava_data_dir(tmp_path_factory):
    """A real prepared TFDS `cassava` directory (generated photos) that tfds.builder loads."""
    return prepared_cassava(tmp_path_factory)


@pytest.fixture(scope="module")
def keras_backbone_file(tmp_path_factory):
    """A ResNet50 backbone weights file in the format of Keras' resnet50 notop .h5 (legacy HDF5)."""
    import h5py
    import keras
    from keras.src.legacy.saving import legacy_h5_format

    train = recipe_module("cassava-resnet", "train")
    path = tmp_path_factory.mktemp("weights") / train.IMAGENET_NOTOP
    backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(64, 64, 3))
    with h5py.File(path, "w") as handle:
        legacy_h5_format.save_weights_to_hdf5_group(handle, backbone)
    return path
