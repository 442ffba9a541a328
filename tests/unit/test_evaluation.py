"""--target (tf_recipes.config.Target): its parsing, direction and the error of a run that missed it;
--eval-every's default, and the curve that a resume continues (what it keeps of curve.json, and the time to
target it counts); the run configuration the command line makes."""
import argparse
import dataclasses
import json

import pytest

from tf_recipes import cli, evaluation
from tf_recipes.config import RunConfig, Target, TargetMissed
from tf_recipes.evaluation import Curve, eval_interval

target_type = cli.target_type


def test_target_parses_a_known_metric_and_a_number():
    parse = target_type(("accuracy",))
    assert parse("accuracy=0.9906") == Target("accuracy", 0.9906)
    assert parse("loss=0.05") == Target("loss", 0.05)


@pytest.mark.parametrize("text, says", [
    ("acuracy=0.99", "must be one of accuracy, loss"),
    ("accuracy", "finite number"),
    ("accuracy=", "finite number"),
    ("accuracy=high", "finite number"),
    ("accuracy=nan", "finite number"),
    ("mean_iou=0.5", "must be one of accuracy, loss"),
])
def test_a_bad_target_names_itself_and_the_form(text, says):
    with pytest.raises(argparse.ArgumentTypeError) as error:
        target_type(("accuracy",))(text)
    assert repr(text) in str(error.value) and says in str(error.value)


def test_a_metric_is_reached_from_above_and_a_loss_from_below():
    assert Target("mean_iou", 0.5).reached({"mean_iou": 0.5})
    assert not Target("mean_iou", 0.5).reached({"mean_iou": 0.4999})
    assert Target("loss", 0.1).reached({"loss": 0.1}) and not Target("loss", 0.1).reached({"loss": 0.2})
    assert str(Target("accuracy", 0.99)) == "accuracy>=0.99" and str(Target("loss", 0.1)) == "loss<=0.1"


@pytest.mark.parametrize("every, total, per_epoch, expected", [
    (None, 1876, 469, 469),  # 4 epochs: one point an epoch
    (None, 1000, 40, 125),  # 25 epochs: about 8 points
    (None, 20, 469, 469),  # shorter than an epoch: the evaluation at the end only
    (50, 1876, 469, 50),
    (0, 1876, 469, 0),
])
def test_eval_interval(every, total, per_epoch, expected):
    assert eval_interval(every, total, per_epoch) == expected


def test_the_first_point_at_the_target_is_the_time_to_target(tmp_path):
    target, curve = Target("accuracy", 0.99), Curve(str(tmp_path), global_batch=128)
    curve.add(100, {"loss": 0.1, "accuracy": 0.98, "examples": 10_000})
    assert target.first_reached(curve.points) is None
    missed = target.missed(curve.points, 100, "results/x")
    assert isinstance(missed, TargetMissed) and str(missed).startswith(
        "--target accuracy>=0.99 was not reached in 100 steps (the last evaluation's accuracy: 0.9800)")
    point = curve.add(200, {"loss": 0.05, "accuracy": 0.991, "examples": 10_000})
    curve.add(300, {"loss": 0.04, "accuracy": 0.995, "examples": 10_000})
    assert point["examples_seen"] == 200 * 128 and "examples" not in point
    assert target.first_reached(curve.points) == {"step": 200, "seconds": point["seconds"]}
    assert target.missed(curve.points, 300, "results/x") is None


def test_the_command_line_makes_the_run_configuration_field_by_field():
    parser = cli.training_parser("t", batch_size=16, epochs=3, lr=1e-3)
    flags = ["--batch-size", "8", "--max-steps", "40", "--target", "accuracy=0.9", "--no-export", "--profile", "2:4"]
    config = cli.configuration(parser.parse_args(flags))
    assert config == dataclasses.replace(RunConfig(), batch_size=8, epochs=3, max_steps=40, export=False,
                                         target=Target("accuracy", 0.9), profile=(2, 4), flags=config.flags)
    assert config.flags["target"] == "accuracy=0.9" and config.flags["profile"] == "2:4"  # as config.yaml keeps them
    # every field but the recipe's own defaults (and the flags that made it) is the configuration's default
    defaults = cli.configuration(parser.parse_args([]))
    recipe_set = ("batch_size", "epochs", "lr", "flags")
    assert {f.name: getattr(defaults, f.name) for f in dataclasses.fields(RunConfig) if f.name not in recipe_set} == {
        f.name: f.default for f in dataclasses.fields(RunConfig) if f.name not in recipe_set}


def test_a_resume_keeps_the_points_up_to_its_checkpoint_and_their_time(tmp_path):
    saved = {"step": 200, "seconds": 500.0, "points": [
        {"step": 100, "examples_seen": 12_800, "seconds": 250.0, "accuracy": 0.98},
        {"step": 200, "examples_seen": 25_600, "seconds": 480.0, "accuracy": 0.991}]}
    (tmp_path / evaluation.CURVE_FILE).write_text(json.dumps(saved))
    target, curve = Target("accuracy", 0.99), Curve(str(tmp_path), global_batch=128)
    curve.restore(200)
    assert [p["step"] for p in curve.points] == [100, 200]
    assert curve.earlier_seconds == 500.0 and curve.seconds() >= 500.0
    assert target.first_reached(curve.points) == {"step": 200, "seconds": 480.0}
    # The checkpoint before it (the newest was damaged): its own points, and the time of its last point.
    older = Curve(str(tmp_path), global_batch=128)
    older.restore(150)
    assert [p["step"] for p in older.points] == [100] and older.earlier_seconds == 250.0
    assert target.first_reached(older.points) is None


def test_a_missing_or_damaged_curve_starts_empty(tmp_path):
    curve = Curve(str(tmp_path), global_batch=8)
    curve.restore(10)
    assert curve.points == [] and curve.earlier_seconds == 0.0
    assert curve.restore(10) is None
    (tmp_path / evaluation.CURVE_FILE).write_text("{not json")
    said = curve.restore(10)
    assert curve.points == [] and "cannot be read" in said and "without the points before it" in said


def test_process_seconds_counts_from_the_process_start():
    assert 0.0 < evaluation.process_seconds() < 24 * 3600
