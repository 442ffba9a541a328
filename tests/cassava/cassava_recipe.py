"""The cassava-resnet recipe's modules, imported under names no other recipe's tests use.

The recipe folder has a dash and its train.py shares a file name with every other recipe, so the
modules are loaded from their files: `cassava_recipe.train`, `.input_pipeline`, `.generated_cassava`.
"""
import importlib.util
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "cassava-resnet"
for path in (str(REPO), str(RECIPE)):
    if path not in sys.path:
        sys.path.append(path)  # appended: another recipe's module of the same name must not be shadowed


def _load(name, module_name):
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, RECIPE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved  # the scripts put their folder first; other recipes' tests must not see it
    return module


input_pipeline = _load("input_pipeline", "input_pipeline")  # train.py imports it by this name
generated_cassava = _load("generated_cassava", "generated_cassava")
train = _load("train", "cassava_train")

# Small photos keep the tests quick; their sizes differ, as the real ones do.
TEST_PHOTO_SIZES = ((96, 72), (120, 90), (72, 96))
SPLITS = {"train": 24, "validation": 7, "test": 3}


def prepared_cassava(tmp_path_factory) -> pathlib.Path:
    data_dir = tmp_path_factory.mktemp("tfds")
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

    path = tmp_path_factory.mktemp("weights") / train.IMAGENET_NOTOP
    backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(64, 64, 3))
    with h5py.File(path, "w") as handle:
        legacy_h5_format.save_weights_to_hdf5_group(handle, backbone)
    return path
