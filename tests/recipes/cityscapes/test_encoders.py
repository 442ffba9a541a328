"""The context module and the ResNet50 U-Net of encoders.py: shapes at any input size, per-pixel probabilities,
the backbone's weights read from a file exactly, and one-line errors for a weights file that is missing or not
ResNet50's and for ImageNet weights that cannot be downloaded."""
import numpy as np
import pytest

from helpers import recipe_module

encoders = recipe_module("cityscapes-unet", "encoders")
model_module = recipe_module("cityscapes-unet", "model")


def norm(kind):
    return lambda channels, name: model_module.normalization_layer(kind, channels, name, 1)


def images(count, size, seed=0):
    return np.random.default_rng(seed).random((count, *size, 3), dtype=np.float32) * 255  # pixels 0..255


@pytest.mark.parametrize("kind", ["group", "batch", None])
def test_the_context_module_keeps_the_size_of_any_input(kind):
    import keras
    inputs = keras.Input((None, None, 16))
    outputs = encoders.context_module(inputs, 8, norm(kind) if kind else None, "context", encoders.atrous_rates(32))
    module = keras.Model(inputs, outputs)
    for size in ((4, 8), (6, 10)):
        features = np.random.default_rng(1).random((2, *size, 16), dtype=np.float32)
        assert module(features).shape == (2, *size, 8)
    assert encoders.atrous_rates(16) == (6, 12, 18) and encoders.atrous_rates(32) == (3, 6, 9)


@pytest.fixture(scope="module")
def unet():
    import keras
    keras.utils.set_random_seed(3)
    return encoders.build_resnet50_unet(5, norm("group"), None)


def test_resnet50_unet_gives_probabilities_of_every_class_at_the_input_size(unet):
    for size in ((64, 128), (96, 64)):
        probabilities = unet(images(2, size), training=False).numpy()
        assert probabilities.shape == (2, *size, 5) and probabilities.dtype == np.float32
        np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, atol=1e-5)
    assert unet.get_layer("categories").dtype_policy.name == "float32"
    # From scratch, the backbone's batch norm trains
    assert all(layer.trainable for layer in unet.get_layer("resnet50").layers)


def test_the_resnet50_preprocessing_is_keras_own_on_the_raw_pixels():
    import keras
    pixels = images(1, (4, 4))
    expected = keras.applications.resnet50.preprocess_input(pixels.copy())
    np.testing.assert_allclose(encoders.ImageNetPixels()(pixels).numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("suffix", [".weights.h5", ".h5"])
def test_a_weights_file_of_resnet50_loads_exactly_and_freezes_its_batch_norm(tmp_path, suffix):
    import keras
    keras.utils.set_random_seed(7)
    source = keras.applications.ResNet50(weights=None, include_top=False, input_shape=(None, None, 3))
    path = tmp_path / f"resnet50{suffix}"
    if suffix == ".h5":  # the format of Keras's downloadable file: a whole-model HDF5 file
        source.save(path)
    else:
        source.save_weights(path)
    keras.utils.set_random_seed(8)
    unet = encoders.build_resnet50_unet(5, norm("group"), str(path))
    loaded = unet.get_layer("resnet50").get_weights()
    assert len(loaded) == len(source.get_weights())
    assert all(np.array_equal(a, b) for a, b in zip(loaded, source.get_weights(), strict=True))
    frozen = [layer for layer in unet.get_layer("resnet50").layers
              if isinstance(layer, keras.layers.BatchNormalization)]
    assert frozen and not any(layer.trainable for layer in frozen)


def test_a_missing_or_foreign_weights_file_is_a_value_error_naming_it(tmp_path):
    import keras
    missing = tmp_path / "nowhere.h5"
    with pytest.raises(ValueError, match=f"{missing} does not exist"):
        encoders.build_resnet50_unet(5, None, str(missing))
    junk = tmp_path / "junk.h5"
    junk.write_text("not HDF5")
    with pytest.raises(ValueError, match=f"{junk} cannot be loaded"):
        encoders.build_resnet50_unet(5, None, str(junk))
    other = tmp_path / "other.weights.h5"
    small = keras.Sequential([keras.Input((None, None, 3)), keras.layers.Conv2D(4, 3)])
    small.save_weights(other)
    with pytest.raises(ValueError, match=f"{other} cannot be loaded") as error:
        encoders.build_resnet50_unet(5, None, str(other))
    assert "\n" not in str(error.value)


def test_imagenet_weights_that_cannot_be_downloaded_ask_for_a_file(monkeypatch):
    from keras.src.utils import file_utils

    def offline(*args, **kwargs):
        raise Exception("URL fetch failure on https://storage.example/weights.h5: None -- no such host")
    monkeypatch.setattr(file_utils, "get_file", offline)
    with pytest.raises(ValueError, match="could not be downloaded.*pass the path of a copy of "
                                         f"{encoders.IMAGENET_FILE}") as error:
        encoders.build_resnet50_unet(5, None, "imagenet")
    assert "\n" not in str(error.value)
