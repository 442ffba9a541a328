"""The views of Cityscapes labels the recipe trains and scores, and its scores, against cityscapesScripts'
own label table and evaluation functions."""
import numpy as np
import pytest
from cityscapesscripts.evaluation import evalPixelLevelSemanticLabeling as official
from cityscapesscripts.helpers.labels import labels as OFFICIAL_LABELS

from helpers import recipe_module

labels = recipe_module("cityscapes-unet", "labels")
model = recipe_module("cityscapes-unet", "model")
VIEWS = labels.cityscapes_views()


def test_classes_are_the_19_train_ids_and_every_other_label_is_ignored():
    classes = VIEWS["classes"]
    assert len(classes["names"]) == 19
    for label in OFFICIAL_LABELS:
        if label.id < 0:
            continue
        expected = labels.IGNORE if label.ignoreInEval else label.trainId
        assert classes["lookup"][label.id] == expected, label.name
        if not label.ignoreInEval:
            assert classes["names"][label.trainId] == label.name
            assert classes["label_ids"][label.trainId] == label.id
            assert classes["groups"][classes["group_of"][label.trainId]] == label.category
    assert classes["lookup"][255] == labels.IGNORE  # a license plate's -1 as uint8
    assert sorted(set(classes["lookup"]) - {labels.IGNORE}) == list(range(19))


def test_categories_are_the_7_evaluated_ones_with_void_ignored():
    categories = VIEWS["categories"]
    assert categories["names"] == ["flat", "construction", "object", "nature", "sky", "human", "vehicle"]
    for label in OFFICIAL_LABELS:
        if label.id >= 0:
            expected = labels.IGNORE if label.ignoreInEval else categories["names"].index(label.category)
            assert categories["lookup"][label.id] == expected, label.name
    # a category is written back as a label id of that category
    by_id = {label.id: label for label in OFFICIAL_LABELS}
    assert [by_id[i].category for i in categories["label_ids"]] == categories["names"]


def test_a_pairs_class_marked_ignore_is_ignored_and_the_rest_renumbered():
    view = labels.pairs_view(["unlabeled", "road", "sky"], [(0, 0, 0), (1, 1, 1), (2, 2, 2)], {"unlabeled"})
    assert view["names"] == ["road", "sky"] and view["colours"] == [[1, 1, 1], [2, 2, 2]]
    assert view["lookup"][:3] == [labels.IGNORE, 0, 1] and set(view["lookup"][3:]) == {labels.IGNORE}


def test_invalid_label_ids_names_ids_cityscapes_does_not_define():
    ids = np.array([[0, 7, 33, 34], [255, 200, 7, 7]], np.uint8)
    assert labels.invalid_label_ids(ids) == [34, 200]


def official_scores(label_confusion):
    """cityscapesScripts' own class and category IoU of a confusion matrix over label ids."""
    args = official.args
    official.generateMatrix(args)  # fills args.evalLabels
    per_class = {label.name: official.getIouScoreForLabel(label.id, label_confusion, args)
                 for label in OFFICIAL_LABELS if label.id >= 0 and not label.ignoreInEval}
    per_category = {category: official.getIouScoreForCategory(category, label_confusion, args)
                    for category in VIEWS["categories"]["names"]}
    return per_class, per_category


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_class_and_category_iou_match_the_official_evaluation(seed):
    """A random prediction of the 19 classes against random truth (ignored labels included, some classes
    absent): the recipe's scores from its confusion matrix equal cityscapesScripts' from the label ids'."""
    rng = np.random.default_rng(seed)
    classes = VIEWS["classes"]
    truth_ids = rng.choice(np.array([i for i in range(34) if i not in (12, 31)], np.uint8), 5000)
    train = classes["names"].index("train")  # id 31: in neither truth nor prediction
    predicted = rng.choice(np.array([c for c in range(19) if c != train]), 5000)
    right = np.array(classes["lookup"])[truth_ids[:3000]]
    predicted[:3000] = np.where(right == labels.IGNORE, predicted[:3000], right)  # some right
    predicted_ids = np.array(classes["label_ids"])[predicted]

    label_confusion = np.zeros((34, 34), np.ulonglong)
    np.add.at(label_confusion, (truth_ids, predicted_ids), 1)
    truth = np.array(classes["lookup"])[truth_ids]
    kept = truth != labels.IGNORE
    confusion = np.zeros((19, 19))
    np.add.at(confusion, (truth[kept], predicted[kept]), 1)

    ours = model.segmentation_scores(confusion, classes["group_of"])
    per_class, per_category = official_scores(label_confusion)
    for name, iou in zip(classes["names"], ours["iou_per_class"], strict=True):
        assert (iou is None and np.isnan(per_class[name])) or iou == pytest.approx(per_class[name], abs=1e-12), name
    for name, iou in zip(classes["groups"], ours["iou_per_category"], strict=True):
        assert iou == pytest.approx(per_category[name], abs=1e-12), name
    assert ours["mean_iou"] == pytest.approx(np.nanmean(list(per_class.values())), abs=1e-12)
    assert ours["category_mean_iou"] == pytest.approx(np.nanmean(list(per_category.values())), abs=1e-12)
    assert ours["iou_per_class"][train] is None  # an absent class counts in neither mean
