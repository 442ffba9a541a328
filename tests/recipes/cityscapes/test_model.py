"""The UNet's normalisation and how its prediction is scored. Without normalisation every pixel is computed
from the pixels around it only; group norm (the cpu and full presets) normalises each image on its own, so
the rest of the batch, and so the number of replicas it is split over, cannot change what it predicts;
batch norm (--norm batch) depends on the batch. These checks tell each of them apart. A model that sees
scenes smaller than their categories is scored against the categories at their own size."""
import numpy as np
import pytest

from helpers import recipe_module

model_module = recipe_module("cityscapes-unet", "model")
IGNORE = recipe_module("cityscapes-unet", "labels").IGNORE
train = recipe_module("cityscapes-unet", "train")


def images(count, seed=0, size=(64, 128)):
    return np.random.default_rng(seed).random((count, *size, 3), dtype=np.float32)


def tiny(normalization=None):
    import keras
    keras.utils.set_random_seed(1)
    args = (8, 2, 0.0) if normalization is None else (8, 2, 0.0, normalization)
    return model_module.build_unet(*args)


def batch_effect(model, batch):
    """How much the first image's output changes when the rest of the batch is there."""
    return np.abs(model(batch, training=True).numpy()[:1] - model(batch[:1], training=True).numpy()).max()


def extent_effect(model, image):
    """How much the output near the top-left corner changes when only the left half of the image is given
    (the pixels compared lie 40 columns from the cut, beyond the tiny UNet's reach)."""
    whole = model(image, training=False).numpy()[:, :, :24]
    half = model(image[:, :, :64], training=False).numpy()[:, :, :24]
    return np.abs(whole - half).max()


@pytest.mark.parametrize("preset", sorted(train.PRESETS))
def test_each_preset_s_normalisation_and_flags_override_it(preset):
    # full and resnet50: batch norm, synchronized, for models that train on crops and evaluate whole scenes
    expected = {"tiny": "none", "full": "batch", "resnet50": "batch"}.get(preset, "group")
    assert train.parse_args(["--preset", preset]).norm == expected
    assert train.parse_args(["--preset", preset, "--batch-norm"]).norm == "batch"
    assert train.parse_args(["--preset", preset, "--norm", "none"]).norm == "none"
    assert train.parse_args(["--preset", preset, "--batch-norm", "--no-batch-norm"]).norm == "none"
    assert train.NORMALIZATIONS == model_module.NORMALIZATIONS


def test_default_prediction_depends_on_neither_the_batch_the_mode_nor_the_extent():
    model, batch = tiny(), images(4)
    np.testing.assert_allclose(model(batch, training=True).numpy(), model(batch, training=False).numpy(), atol=1e-6)
    assert batch_effect(model, batch) < 1e-5
    assert extent_effect(model, batch[:1]) < 1e-5
    # Nothing for the replicas to keep equal besides the weights: no moving statistics.
    assert [v for v in model.non_trainable_variables if "float" in str(v.dtype)] == []


def test_batch_and_group_norm_are_there_and_each_fails_one_check():
    batch_norm, group_norm, batch = tiny("batch"), tiny("group"), images(4)
    # batch norm over the global batch: synchronized over the replicas (tests/integration/test_sync_batch_norm.py)
    assert any(type(layer).__name__ == "SyncBatchNormalization" and layer.synchronized for layer in batch_norm.layers)
    assert batch_effect(batch_norm, batch) > 1e-3
    assert batch_effect(group_norm, batch) < 1e-5
    assert extent_effect(group_norm, batch[:1]) > 1e-3


def test_group_counts_fit_any_filter_count():
    model = model_module.build_unet(12, 2, 0.0, "group")  # 12, 24 and 48 channels: 4 groups, then 8
    groups = sorted({layer.groups for layer in model.layers if type(layer).__name__ == "GroupNormalization"})
    assert groups == [4, 8]
    assert model(images(1), training=False).shape == (1, 64, 128, 19)
    with pytest.raises(ValueError, match="normalization"):
        model_module.build_unet(8, 2, 0.0, True)


def test_presets_set_what_a_step_sees_and_the_rate_and_flags_override_them():
    cpu = train.parse_args(["--preset", "cpu"])
    assert (cpu.downscale, cpu.crop, cpu.scale, cpu.cache, cpu.batch_size) == ("auto", None, (1.0, 1.0), True, 8)
    # auto: whole scenes about 128 rows high, by a power of two that divides both sides into sides the UNet takes
    assert [train.downscale_for(size, 4) for size in ((1024, 2048), (512, 1024), (256, 512), (720, 1280))] == [
        8, 4, 2, 1]
    assert (cpu.epochs, cpu.lr_schedule, cpu.lr_warmup_steps, cpu.lr) == (60, "cosine", 20, 2e-3)
    full = train.parse_args(["--preset", "resnet50"])
    assert (full.model, full.encoder_weights, full.batch_size) == ("resnet50-unet", "imagenet", 2)
    assert (full.downscale, full.crop, full.scale, full.cache) == (1, (512, 1024), (0.5, 2.0), False)
    assert (full.iterations, full.lr_schedule, full.lr_warmup_steps, full.lr) == (80_000, "cosine", 1000, 1e-4)
    # 80,000 iterations at 2 per GPU on 8 GPUs over Cityscapes' 2,975 scenes: 185 steps an epoch, 433 epochs
    planned = train.resolve(full, (1024, 2048), 2975, 8)
    assert (planned.epochs, planned.max_steps, planned.downscale, planned.eval_size) == (433, 80_000, 1, (1024, 2048))
    assert planned.plan(2975, 8).total_steps == 80_000 and full.max_steps is None  # resolved anew, never in place
    assert train.resolve(cpu, (1024, 2048), 80, 1).downscale == 8
    # Another global batch than the 16 the preset is given at trains the same samples, the rate scaled linearly
    doubled = train.resolve(full, (1024, 2048), 2975, 16)
    assert (doubled.iterations, doubled.max_steps, doubled.lr_warmup_steps) == (40_000, 40_000, 500)
    assert doubled.lr == pytest.approx(2e-4) and doubled.plan(2975, 16).global_batch * 40_000 == 16 * 80_000
    one_gpu = train.resolve(full, (1024, 2048), 2975, 1)
    assert (one_gpu.iterations, one_gpu.lr) == (640_000, pytest.approx(1.25e-5))
    line = train.schedule_line(full, doubled, doubled.plan(2975, 16))
    assert line.startswith("schedule: 40,000 iterations of global batch 32: 1,280,000 samples, 430.3 epochs")
    assert "given at global batch 16 (--reference-batch)" in line
    as_given = train.resolve(train.parse_args(["--preset", "resnet50", "--reference-batch", "0"]), (1024, 2048),
                             2975, 16)
    assert (as_given.iterations, as_given.lr) == (80_000, 1e-4)
    assert "--reference-batch" not in train.schedule_line(full, planned, planned.plan(2975, 8))
    assert train.parse_args(["--epochs", "3"]).iterations is None  # --epochs given: the epochs count
    assert train.parse_args(["--preset", "resnet50", "--encoder-weights", "none"]).encoder_weights is None
    assert train.parse_args(["--encoder-weights", "none"]).encoder_weights is None
    overridden = train.parse_args(["--preset", "cpu", "--epochs", "3", "--lr-schedule", "constant",
                                   "--lr-warmup-steps", "5", "--lr", "0.01", "--downscale", "2", "--crop", "64x128",
                                   "--scale", "0.5:2", "--no-cache"])
    assert (overridden.epochs, overridden.lr_schedule, overridden.lr_warmup_steps, overridden.lr) == (
        3, "constant", 5, 0.01)
    assert (overridden.downscale, overridden.crop, overridden.scale, overridden.cache) == (2, (64, 128), (0.5, 2.0),
                                                                                         False)


def test_a_smaller_prediction_is_scored_against_the_truth_at_its_own_size_and_ignored_pixels_do_not_count():
    import tensorflow as tf

    truth = np.zeros((1, 4, 8), np.int32)
    truth[0, 0, 0] = 1  # one pixel of class 1, smaller than a pixel of the prediction
    truth[0, 3, :] = IGNORE  # a row that counts in neither the metric nor the loss
    predicted = tf.one_hot(np.zeros((1, 2, 4), np.int32), 3)  # class 0 everywhere, at half the size
    confusion = model_module.confusion_sums(tf.constant(truth), predicted)["confusion"].numpy().reshape(3, 3)
    assert confusion.tolist() == [[23, 0, 0], [1, 0, 0], [0, 0, 0]]
    scores = model_module.summarize()({"confusion": confusion.ravel()})
    assert scores["iou_per_class"] == [23 / 24, 0.0, None] and scores["mean_iou"] == (23 / 24) / 2
    loss = model_module.cross_entropy_dice(tf.constant(truth), predicted)
    assert loss.shape == (1,) and np.isfinite(loss.numpy()).all()
    # whatever the model predicts on the ignored pixels, the loss is the same
    other = tf.tensor_scatter_nd_update(tf.image.resize(predicted, (4, 8)), [[0, 3, c] for c in range(8)],
                                        tf.one_hot([2] * 8, 3))
    again = model_module.cross_entropy_dice(tf.constant(truth), other)
    assert np.allclose(again.numpy(), model_module.cross_entropy_dice(tf.constant(truth),
                                                                     tf.image.resize(predicted, (4, 8))).numpy())
    everything_ignored = np.full((1, 4, 8), IGNORE, np.int32)
    assert model_module.cross_entropy_dice(tf.constant(everything_ignored), predicted).numpy().tolist() == [0.0]


def test_the_cpu_preset_s_rate_falls_from_its_peak_to_zero():
    from tf_recipes import training

    def rate(replicas, scale_lr):
        config = train.Config(lr=1e-3, scale_lr=scale_lr, lr_warmup_steps=0, lr_schedule="cosine", batch_size=1)
        return training.learning_rate(config, config.plan(100 * replicas, replicas))

    assert [round(float(rate(1, False)(step)), 7) for step in (0, 50, 100, 150)] == [1e-3, 5e-4, 0.0, 0.0]
    doubled = rate(2, True)
    assert round(float(doubled(50)), 7) == 1e-3


def test_the_full_preset_is_mmsegmentation_s_unet_s5_d16_on_cityscapes():
    # configs/unet/fcn_unet_s5-d16_4x4_512x1024_160k_cityscapes.py (mmsegmentation 0.30.0) and its bases
    full = train.parse_args([])
    assert (full.model, full.filters, full.depth, full.norm, full.dropout, full.encoder_weights) == (
        "unet-s5-d16", 64, 4, "batch", 0.1, None)
    assert (full.optimizer, full.lr, full.momentum, full.weight_decay, full.loss) == (
        "sgd", 0.01, 0.9, 5e-4, "cross-entropy")
    assert (full.lr_schedule, full.lr_end, full.lr_warmup_steps) == ("poly", 1e-4, 0)
    assert (full.iterations, full.reference_batch, full.batch_size * 8) == (160_000, 16, 16)
    assert (full.crop, full.scale, full.cat_max_ratio, full.photometric, full.augment) == (
        (512, 1024), (0.5, 2.0), 0.75, True, True)
    assert (full.checkpoint_every, full.eval_every, full.downscale, full.eval_size) == (16_000, 16_000, 1, None)
    planned = train.resolve(full, (1024, 2048), 2975, 8)
    assert (planned.max_steps, planned.lr, planned.lr_end, planned.eval_every) == (160_000, 0.01, 1e-4, 16_000)
    one_gpu = train.resolve(full, (1024, 2048), 2975, 1)  # 2 crops a step: 8 times the steps at 1/8 the rate
    assert (one_gpu.max_steps, one_gpu.lr, one_gpu.lr_end, one_gpu.checkpoint_every) == (
        1_280_000, pytest.approx(1.25e-3), pytest.approx(1.25e-5), 128_000)


def test_unet_s5_d16_has_mmsegmentation_s_layers_heads_and_initialisation():
    import keras

    keras.utils.set_random_seed(0)
    net = model_module.build_unet_s5_d16(19)

    def conv(cin, cout, k, bias=False):
        return cin * cout * k * k + (cout if bias else 0)

    # encoder 64..1024, InterpConv (1x1) + 2 convs per decoder level, two FCN heads; each BN: gamma and beta
    channels = [64 * 2 ** s for s in range(5)]
    convs = [conv(3, 64, 3), conv(64, 64, 3)]
    for s in range(1, 5):
        convs += [conv(channels[s - 1], channels[s], 3), conv(channels[s], channels[s], 3)]
    for s in range(4):
        convs += [conv(channels[s + 1], channels[s], 1), conv(2 * channels[s], channels[s], 3),
                  conv(channels[s], channels[s], 3)]
    normalised = [64, 64] + [c for c in channels[1:] for _ in (0, 1)] + [c for c in channels[:4] for _ in (0, 1, 2)]
    heads = [conv(64, 64, 3), conv(64, 19, 1, True), conv(128, 64, 3), conv(64, 19, 1, True)]
    expected = sum(convs) + sum(heads) + 2 * (sum(normalised) + 64 + 64)
    assert sum(int(np.prod(v.shape)) for v in net.trainable_variables) == expected
    batch_norms = [layer for layer in net.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert {(layer.momentum, layer.epsilon, layer.synchronized) for layer in batch_norms} == {(0.9, 1e-5, True)}
    classifier = net.get_layer("decode_head_classifier").kernel.numpy()
    assert 0.008 < classifier.std() < 0.012 and not net.get_layer("decode_head_0_conv").use_bias
    kernel = net.get_layer("encoder1_1_conv").kernel.numpy()  # Kaiming normal, fan_out: std sqrt(2 / (9 * 128))
    assert kernel.std() == pytest.approx((2 / (9 * 128)) ** 0.5, rel=0.05)
    main, auxiliary = net(images(2) * 255, training=False)
    assert main.shape == auxiliary.shape == (2, 64, 128, 19)


def test_the_loss_is_mmsegmentation_s_cross_entropy_with_the_auxiliary_head_at_0_4():
    import tensorflow as tf

    rng = np.random.default_rng(3)
    truth = rng.integers(0, 3, (2, 4, 8)).astype(np.int32)
    truth[:, 0] = IGNORE  # ignored pixels add 0 and still count in the mean, as avg_non_ignore=False
    main, auxiliary = (tf.nn.softmax(rng.normal(size=(2, 4, 8, 3)).astype(np.float32)) for _ in range(2))

    def mean_cross_entropy(probabilities):
        p = probabilities.numpy()
        picked = np.take_along_axis(p, np.where(truth == IGNORE, 0, truth)[..., None], -1)[..., 0]
        return np.where(truth == IGNORE, 0.0, -np.log(picked)).mean(axis=(1, 2))

    loss = model_module.cross_entropy(tf.constant(truth), [main, auxiliary]).numpy()
    np.testing.assert_allclose(loss, mean_cross_entropy(main) + 0.4 * mean_cross_entropy(auxiliary), rtol=1e-5)
    assert model_module.prediction([main, auxiliary]) is main


def test_coupled_sgd_steps_as_pytorch_s_sgd_with_weight_decay_and_a_changing_rate():
    import keras
    import tensorflow as tf

    weight = keras.Variable(np.array([1.0, -2.0, 0.5], np.float32))
    class Rates(keras.optimizers.schedules.LearningRateSchedule):  # the rate of each step, as a poly one changes
        def __call__(self, step):
            return tf.gather(tf.constant([0.1, 0.05, 0.02]), step)

    optimizer = model_module.CoupledSGD(Rates(), momentum=0.9, coupled_weight_decay=0.01)
    expected, buffer = np.array([1.0, -2.0, 0.5]), None
    for step, (gradient, rate) in enumerate(zip([[0.5, 0.1, -1.0], [0.2, -0.3, 0.4], [1.0, 1.0, 1.0]],
                                                [0.1, 0.05, 0.02], strict=True)):
        optimizer.apply_gradients([(tf.constant(gradient, tf.float32), weight)])
        # torch.optim.SGD: d = g + wd w; b = d (first step), else m b + d; w -= lr b
        d = np.array(gradient) + 0.01 * expected
        buffer = d if step == 0 else 0.9 * buffer + d
        expected = expected - rate * buffer
        np.testing.assert_allclose(weight.numpy(), expected, rtol=1e-6)


INITIAL_WEIGHTS = """import hashlib, sys
sys.path.insert(0, sys.argv[1])
import keras, model
keras.utils.set_random_seed(0)
net = model.build_unet_s5_d16(19, filters=8)
print(hashlib.sha256(b"".join(v.numpy().tobytes() for v in net.weights)).hexdigest())"""


def test_unet_s5_d16_starts_from_the_same_weights_in_every_process_and_gives_each_layer_its_own():
    # Two fresh processes, as two runs of the same command (or a run and its rerun from config.yaml) are.
    import subprocess
    import sys

    from helpers import RECIPES

    digests = [subprocess.run([sys.executable, "-c", INITIAL_WEIGHTS, str(RECIPES / "cityscapes-unet")],
                              capture_output=True, text=True, check=True).stdout.strip() for _ in range(2)]
    assert digests[0] == digests[1] and len(digests[0]) == 64
    import keras

    keras.utils.set_random_seed(0)
    net = model_module.build_unet_s5_d16(19, filters=8)
    kernels = {}  # the Kaiming-initialised convolutions, by their kernel's shape
    for layer in net.layers:
        if isinstance(layer, keras.layers.Conv2D) and not layer.name.endswith("_classifier"):
            kernels.setdefault(tuple(layer.kernel.shape), []).append(layer.kernel.numpy())
    alike = [shape for shape, group in kernels.items() if len(group) > 1]
    assert alike, "the model should have layers of one shape to compare"
    for shape in alike:
        group = kernels[shape]
        assert all(not np.array_equal(a, b) for i, a in enumerate(group) for b in group[i + 1:]), shape
