"""cassava-resnet's model: ImageNet preprocessing inside the model, --weights imagenet|none|PATH,
and the errors a user sees (offline ImageNet weights, a missing or wrong weights file)."""
import time

import h5py
import keras
import numpy as np
import pytest

from helpers import recipe_module, run_python
from tf_recipes import data

train = recipe_module("cassava-resnet", "train")
TRAIN = "recipes/cassava-resnet/train.py"
SIZE = 32
NO_PROXY = {"HTTPS_PROXY": "", "https_proxy": "", "ALL_PROXY": "", "all_proxy": ""}
OFFLINE = {"TF_RECIPES_FAULT_DOWNLOAD_HOST": "unreachable.invalid", **NO_PROXY}  # a machine without a network


def test_preprocessing_is_caffe_style_on_0_255_inputs_not_zero_one_scaling():
    images = np.random.default_rng(0).integers(0, 256, (2, 4, 4, 3)).astype(np.uint8)
    out = keras.ops.convert_to_numpy(train.ImageNetPreprocessing()(images))
    expected = images[..., ::-1].astype(np.float32) - np.array([103.939, 116.779, 123.68], np.float32)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-4)


def test_the_model_takes_uint8_and_keeps_a_float32_softmax_under_mixed_precision():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = train.build_model(SIZE, None)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert model.input.dtype == "uint8"
    assert model.get_layer("imagenet_preprocessing").compute_dtype == "float32"
    assert model.output.dtype == "float32" and model.output.shape[-1] == 5
    assert [layer.units for layer in model.layers if isinstance(layer, keras.layers.Dense)] == [1016, 5]


@pytest.fixture(scope="module")
def weight_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("weights")
    backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(SIZE, SIZE, 3))
    backbone.save_weights(folder / "backbone.weights.h5")
    # The Keras notop file's format (a legacy HDF5 weights file), as keras.applications reads it.
    from keras.src.legacy.saving import legacy_h5_format
    with h5py.File(folder / "notop.h5", "w") as handle:
        legacy_h5_format.save_weights_to_hdf5_group(handle, backbone)
    whole = train.build_model(SIZE, None)
    whole.save_weights(folder / "final.weights.h5")
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    other.save_weights(folder / "other.weights.h5")
    (folder / "notes.h5").write_text("not a weights file")
    return folder, backbone.get_weights(), whole.get_weights()


@pytest.mark.parametrize("name", ["backbone.weights.h5", "notop.h5"])
def test_a_backbone_weights_file_is_loaded_into_the_backbone(weight_files, name):
    folder, backbone_weights, _ = weight_files
    model = train.build_model(SIZE, str(folder / name))
    loaded = model.get_layer("resnet50").get_weights()
    assert len(loaded) == len(backbone_weights)
    assert all(np.array_equal(a, b) for a, b in zip(loaded, backbone_weights, strict=True))


def test_a_final_weights_file_of_this_recipe_is_loaded_into_the_whole_model(weight_files):
    folder, _, whole_weights = weight_files
    loaded = train.build_model(SIZE, str(folder / "final.weights.h5")).get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(loaded, whole_weights, strict=True))


@pytest.mark.parametrize("name", ["other.weights.h5", "notes.h5"])
def test_a_file_that_is_not_this_models_weights_is_refused(weight_files, name):
    folder, _, _ = weight_files
    with pytest.raises(train.WeightsError, match=r"is not a weights file this model can load.*--weights none"):
        train.build_model(SIZE, str(folder / name))


# -- what a user sees ----------------------------------------------------------------------------

def test_imagenet_weights_offline_fail_fast_with_the_way_around(tmp_path):
    started = time.monotonic()
    process = run_python("-m", "tf_recipes.operations.faults", TRAIN, "--synthetic", "--image-size", "64",
                         "--max-steps", "1", "--results-dir", str(tmp_path / "out"), timeout=120,
                         env={**OFFLINE, "KERAS_HOME": str(tmp_path / "keras")})
    elapsed = time.monotonic() - started
    assert process.returncode == 2, process.stderr[-3000:]
    assert "--weights imagenet" in process.stderr and "unreachable.invalid cannot be reached" in process.stderr
    assert "--weights none" in process.stderr and "--weights PATH" in process.stderr
    assert "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5" in process.stderr
    assert "Traceback" not in process.stderr
    assert elapsed < 30, elapsed
    assert not (tmp_path / "out" / "results.json").exists()


def test_imagenet_weights_already_in_the_keras_cache_need_no_network(tmp_path, monkeypatch):
    for name, value in NO_PROXY.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(data, "DOWNLOAD_HOST", "unreachable.invalid")
    models = tmp_path / "keras" / "models"
    models.mkdir(parents=True)
    (models / train.IMAGENET_NOTOP).write_bytes(b"")  # present: no reachability check, no download
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    assert train.check_weights("imagenet") == "imagenet"
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "elsewhere"))
    with pytest.raises(train.WeightsError, match="cannot be reached"):
        train.check_weights("imagenet")


def test_a_missing_weights_file_is_named(tmp_path):
    process = run_python(TRAIN, "--synthetic", "--weights", str(tmp_path / "nope.h5"), "--max-steps", "1",
                         "--results-dir", str(tmp_path / "out"), timeout=120)
    assert process.returncode == 2
    assert f"--weights {tmp_path / 'nope.h5'}: no such file" in process.stderr
    assert "Traceback" not in process.stderr


def test_bad_image_size_gets_a_one_line_error():
    process = run_python(TRAIN, "--synthetic", "--image-size", "16", timeout=120)
    assert process.returncode == 2 and "--image-size 16 is below ResNet50's minimum of 32" in process.stderr
