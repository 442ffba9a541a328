"""data.py: shapes, exact counts, early vs late sharding, reproducible augmentation, errors."""
import json

import numpy as np
import pytest
from PIL import Image

from tf_recipes.data import DataError, InputShard, sharded_order
from helpers import recipe_module

data = recipe_module("cityscapes-unet", "data")
IGNORE = recipe_module("cityscapes-unet", "labels").IGNORE
labels = recipe_module("cityscapes-unet", "labels")
layout = recipe_module("cityscapes-unet", "layout")
make_fixture = recipe_module("cityscapes-unet", "make_fixture")
prepare_data = recipe_module("cityscapes-unet", "prepare_data")

TRAIN, VAL, SIZE = 8, 3, (32, 64)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("cityscapes")
    make_fixture.make_fixture(root / "source", train=TRAIN, val=VAL, size=SIZE, seed=7)
    assert prepare_data.prepare(root / "source", root / "prepared", workers=1, log=lambda *_: None) == []
    return root / "prepared"


@pytest.fixture(scope="module")
def example_of(data_dir):
    """Recovers the index of an unaugmented full-size example from its pixels."""
    images = [image[0] for image, _ in data.make_eval_dataset(data_dir, "train", batch_size=1).as_numpy_iterator()]
    assert len(images) == TRAIN

    def lookup(image):
        matches = [i for i, candidate in enumerate(images) if np.array_equal(candidate, image)]
        assert len(matches) == 1
        return matches[0]
    return lookup


def batches(data_dir, shard, total_steps=4, seed=11, **kwargs):
    return list(data.make_train_dataset(data_dir, shard, total_steps, seed, **kwargs).as_numpy_iterator())


def two_pipelines(per_replica=2):
    return [InputShard(2, p, per_replica, 2 * per_replica) for p in range(2)]


def test_shapes_dtypes_ranges_and_exact_count(data_dir):
    shard = InputShard(num_pipelines=2, pipeline_id=1, per_replica_batch=2, global_batch=4)
    out = batches(data_dir, shard, total_steps=7, start_step=2, crop=(16, 32), scale=(0.5, 2.0))
    assert len(out) * 2 == (7 - 2) * 4 // 2  # examples = (total - start) * global / pipelines
    for image, categories in out:
        assert image.shape == (2, 16, 32, 3) and image.dtype == np.float32
        assert categories.shape == (2, 16, 32) and categories.dtype == np.int32
        assert 0.0 <= image.min() and image.max() <= 255.0
        assert ((categories >= 0) & (categories < 19) | (categories == labels.IGNORE)).all()
    assert max(image.max() for image, _ in out) > 1.0  # raw pixels: the model scales them, not the pipeline


def test_two_early_pipelines_split_each_global_batch_of_one_pipeline(data_dir, example_of):
    steps = TRAIN // 4  # one epoch: every example at most once
    single = batches(data_dir, InputShard(1, 0, 4, 4), steps, augment=False)
    pipes = [batches(data_dir, shard, steps, augment=False) for shard in two_pipelines()]
    single_ids = [[example_of(image) for image in batch] for batch, _ in single]
    pipe_ids = [[[example_of(image) for image in batch] for batch, _ in pipe] for pipe in pipes]
    assert sum(single_ids, []) == sharded_order(TRAIN, InputShard(1, 0, 4, 4), steps, seed=11).tolist()
    for step in range(steps):
        first, second = pipe_ids[0][step], pipe_ids[1][step]
        assert not set(first) & set(second)
        assert sorted(first + second) == sorted(single_ids[step])
    everything = sum(pipe_ids[0], []) + sum(pipe_ids[1], [])
    assert len(set(everything)) == len(everything) == steps * 4


@pytest.mark.parametrize("kwargs", [dict(crop=(16, 32), scale=(0.7, 1.4)),  # zoom and crop at full size
                                    dict(downscale=2, scale=(1.0, 1.0), cache=True),  # the cpu preset's way
                                    # the full preset's: mmsegmentation's class ratio rule and colour changes
                                    dict(crop=(16, 32), scale=(0.5, 2.0), cat_max_ratio=0.75, photometric=True)],
                         ids=["crop", "downscaled-cached", "full-preset"])
def test_augmentation_follows_the_example_across_launchers_and_resumes(data_dir, kwargs):
    kwargs = dict(total_steps=6, **kwargs)  # 3 epochs
    single = batches(data_dir, InputShard(1, 0, 4, 4), **kwargs)
    pipes = [batches(data_dir, shard, **kwargs) for shard in two_pipelines()]
    for step, (images, categories) in enumerate(single):
        for slot in range(4):  # global slot j sits on pipeline j // 2 at position j % 2 (contiguous slices)
            np.testing.assert_array_equal(images[slot], pipes[slot // 2][step][0][slot % 2])
            np.testing.assert_array_equal(categories[slot], pipes[slot // 2][step][1][slot % 2])
    resumed = batches(data_dir, InputShard(1, 0, 4, 4), start_step=4, **kwargs)
    for (image, categories), (expected_image, expected_categories) in zip(resumed, single[4:], strict=True):
        np.testing.assert_array_equal(image, expected_image)
        np.testing.assert_array_equal(categories, expected_categories)


def test_late_sharding_yields_the_same_examples_as_early(data_dir):
    kwargs = dict(total_steps=5, crop=(16, 32), scale=(0.7, 1.4))
    for shard in two_pipelines():
        early = batches(data_dir, shard, **kwargs)
        late = batches(data_dir, shard, shard_late=True, **kwargs)
        assert len(early) == len(late) == 5
        for (image, categories), (late_image, late_categories) in zip(early, late, strict=True):
            np.testing.assert_array_equal(image, late_image)
            np.testing.assert_array_equal(categories, late_categories)


def test_same_seed_same_batches_other_seed_other_batches(data_dir):
    kwargs = dict(total_steps=4, crop=(16, 32), scale=(0.5, 1.5))
    first = batches(data_dir, InputShard(1, 0, 2, 2), seed=5, **kwargs)
    second = batches(data_dir, InputShard(1, 0, 2, 2), seed=5, **kwargs)
    other = batches(data_dir, InputShard(1, 0, 2, 2), seed=6, **kwargs)
    for (a, b), (c, d) in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    assert any(not np.array_equal(a, c) for (a, _), (c, _) in zip(first, other, strict=True))


def test_image_and_categories_stay_aligned_through_scale_crop_and_flip(data_dir):
    # The fixture colours pixels by label, so a misaligned label map disagrees with the colours.
    colours = make_fixture.LABEL_COLOURS[data.view(data_dir)["label_ids"]].astype(np.float32)
    flips = set()
    for images, categories in batches(data_dir, InputShard(1, 0, 2, 2), total_steps=8,
                                      crop=(24, 48), scale=(0.6, 1.6)):
        counted = categories != labels.IGNORE
        distances = ((images[..., None, :] - colours) ** 2).sum(-1)
        agreement = (distances.argmin(-1) == categories)[counted].mean()
        assert agreement > 0.9
        mirrored = ((images[:, :, ::-1, None, :] - colours) ** 2).sum(-1).argmin(-1)
        flips.add((mirrored == categories)[counted].mean() > agreement)
    assert flips == {False}  # a flipped image always came with a flipped label map


def test_flip_is_applied_to_both_and_sometimes(data_dir, example_of):
    full = data.make_eval_dataset(data_dir, "train", batch_size=TRAIN).as_numpy_iterator()
    originals, original_categories = next(full)
    flipped = 0
    for images, categories in batches(data_dir, InputShard(1, 0, 4, 4), total_steps=6):
        for image, category in zip(images, categories, strict=True):
            as_is = [i for i in range(TRAIN) if np.array_equal(originals[i], image)]
            mirrored = [i for i in range(TRAIN) if np.array_equal(originals[i][:, ::-1], image)]
            assert len(as_is) + len(mirrored) == 1
            if mirrored:
                flipped += 1
                np.testing.assert_array_equal(original_categories[mirrored[0]][:, ::-1], category)
            else:
                np.testing.assert_array_equal(original_categories[as_is[0]], category)
    assert 0 < flipped < 24


def test_cache_gives_the_same_batches(data_dir):
    kwargs = dict(total_steps=5, crop=(16, 32), scale=(0.7, 1.4))
    plain = batches(data_dir, InputShard(2, 0, 2, 4), **kwargs)
    cached = batches(data_dir, InputShard(2, 0, 2, 4), cache=True, **kwargs)
    for (a, b), (c, d) in zip(plain, cached, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


def test_the_node_cache_gives_the_same_batches_to_each_pipeline(data_dir, tmp_path):
    kwargs = dict(total_steps=5, crop=(16, 32), scale=(0.7, 1.4))
    for shard in two_pipelines():  # the second pipeline finds the first one's files and decodes nothing
        scenes = data.cached_train_scenes(data_dir, shard, tmp_path / "cache", scale=(0.7, 1.4), log=lambda line: None)
        plain = batches(data_dir, shard, **kwargs)
        for (a, b), (c, d) in zip(plain, batches(data_dir, shard, cache=True, scenes=scenes, **kwargs), strict=True):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, d)
    with pytest.raises(ValueError, match="same downscale"):
        batches(data_dir, two_pipelines()[0], cache=True, scenes=scenes, downscale=2, **kwargs)


def test_eval_dataset_has_every_example_unaugmented(data_dir):
    assert data.num_examples(data_dir, "val") == VAL
    out = list(data.make_eval_dataset(data_dir, "val", batch_size=2).as_numpy_iterator())
    assert [images.shape for images, _ in out] == [(2, *SIZE, 3), (1, *SIZE, 3)]
    last_id = json.loads(layout.index_path(data_dir, "val").read_text())["examples"][-1]
    stored = np.asarray(Image.open(layout.prepared_labels(data_dir, "val", last_id)))
    expected = np.array(data.view(data_dir)["lookup"])[stored]  # the label ids seen as the 19 classes
    assert (expected == labels.IGNORE).any() and (expected < 19).any()
    np.testing.assert_array_equal(out[-1][1][0], expected)
    # --eval-size shrinks the images the model sees, never the categories it is scored against
    small = list(data.make_eval_dataset(data_dir, "val", batch_size=3, size=(16, 32)).as_numpy_iterator())
    assert small[0][0].shape == (3, 16, 32, 3) and small[0][1].shape == (3, *SIZE)
    np.testing.assert_array_equal(small[0][1][-1], expected)


def test_downscaled_training_sees_whole_scenes_at_the_eval_size_cached_or_not(data_dir):
    shard = InputShard(1, 0, 2, 2)
    plain = batches(data_dir, shard, total_steps=4, downscale=2, scale=(1.0, 1.0))
    cached = batches(data_dir, shard, total_steps=4, downscale=2, scale=(1.0, 1.0), cache=True)
    half = (SIZE[0] // 2, SIZE[1] // 2)
    assert [images.shape for images, _ in plain] == [(2, *half, 3)] * 4
    for (a, b), (c, d) in zip(plain, cached, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    # Unflipped, a training scene is its eval image: the same shrink from full size
    evaluated = [image for image, _ in data.make_eval_dataset(data_dir, "train", batch_size=1, size=half)
                 .as_numpy_iterator()]
    unflipped = [image for images, _ in plain for image in images
                 if any(np.array_equal(image, other[0]) for other in evaluated)]
    assert unflipped
    with pytest.raises(DataError, match="downscale 3 does not divide the 32x64 images"):
        data.make_train_dataset(data_dir, shard, 2, 0, downscale=3)


def test_missing_or_incomplete_data_names_the_path_and_the_fix(data_dir, tmp_path):
    shard = InputShard(1, 0, 2, 2)
    with pytest.raises(DataError, match=r"prepare_data\.py --source .* --out .*nowhere"):
        data.make_train_dataset(tmp_path / "nowhere", shard, 2, 0)
    (tmp_path / "train").mkdir()  # outputs of an unfinished prepare run, but no index
    with pytest.raises(DataError, match="has no train.json"):
        data.num_examples(tmp_path, "train")
    with pytest.raises(DataError, match="crop 64x64 does not fit the 32x64 images"):
        data.make_train_dataset(data_dir, shard, 2, 0, crop=(64, 64))


def test_a_crop_is_drawn_again_while_one_class_covers_three_quarters_of_it_as_mmsegmentation_does():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    image = tf.constant(rng.integers(0, 256, (64, 256, 3), dtype=np.uint8))
    truth = np.zeros((64, 256), np.uint8)
    truth[:, :48] = 3  # a second class in the left fifth only: most 32x64 crops hold road alone
    truth[:8] = IGNORE  # ignored pixels count for no class

    def crops(ratio):
        augment = tf.function(lambda p: data._augment(image, tf.constant(truth), p, 0, (32, 64), (1.0, 1.0), ratio))
        return [augment(tf.constant(p, tf.int64))[1].numpy() for p in range(40)]

    def acceptable(crop):
        counts = np.bincount(crop[crop != IGNORE].ravel(), minlength=4)
        return (counts > 0).sum() > 1 and counts.max() / counts.sum() < 0.75

    plain, ruled = crops(1.0), crops(0.75)
    assert sum(map(acceptable, ruled)) > sum(map(acceptable, plain)) + 10
    for first, crop in zip(plain, ruled, strict=True):  # a first draw the rule keeps is kept as drawn
        if acceptable(first):
            np.testing.assert_array_equal(crop, first)


def test_the_photometric_distortion_changes_colours_only_and_is_off_unless_asked(data_dir):
    kwargs = dict(crop=(16, 32), scale=(0.5, 2.0), total_steps=2)
    plain = batches(data_dir, InputShard(1, 0, 4, 4), **kwargs)
    coloured = batches(data_dir, InputShard(1, 0, 4, 4), photometric=True, **kwargs)
    assert batches(data_dir, InputShard(1, 0, 4, 4), photometric=False, **kwargs)[0][0].tobytes() == \
        plain[0][0].tobytes()
    for (images, truth), (changed, same_truth) in zip(plain, coloured, strict=True):
        np.testing.assert_array_equal(truth, same_truth)  # the labels and the geometry stay
        assert not np.array_equal(images, changed)
        assert changed.min() >= 0 and changed.max() <= 255 and np.array_equal(changed, np.floor(changed))
