"""A run's kept configuration (RESULTS/config.yaml, tf_recipes.config.config_yaml) read back by
`train.py --config FILE` (tf_recipes.cli.TrainingParser): every recipe's flags come back as they were
parsed, tuples and targets included, a flag given beside --config overrides the file, and a bad file is
one line naming it. The run that writes the file and the rerun from it, as docs/running.md shows them:
tests/integration/test_documented_commands.py."""
import pytest

from tf_recipes.config import config_yaml
from test_bad_numbers import assert_one_error_line, recipe_parser

ARGV = {
    "mnist-cnn": ["--synthetic", "--max-steps", "6", "--lr", "0.002", "--amp", "bfloat16", "--target",
                  "accuracy=0.5", "--profile", "2:4", "--no-export", "--optimizer", "sgd", "--scale-lr"],
    "cassava-resnet": ["--synthetic", "--no-scale-lr", "--image-size", "64", "--weights", "none", "--amp",
                       "--eval-every", "0", "--bn-momentum", "0.9"],
    "cityscapes-unet": ["--preset", "tiny", "--crop", "64x128", "--scale", "0.5:2", "--target", "mean_iou=0.5",
                        "--batch-norm", "--no-cache", "--epochs", "3", "--lr", "1e-3", "--no-amp"],
}


def kept(parse, argv, folder):
    """The config.yaml of a run parsed from `argv`, as save_results writes it; its path."""
    path = folder / "config.yaml"
    path.write_text(config_yaml("a-recipe", parse(argv).flags))
    return path


def without(namespace, *names):
    return {name: value for name, value in vars(namespace).items() if name not in names}


@pytest.mark.parametrize("recipe", ARGV)
def test_the_kept_configuration_parses_to_the_same_run(recipe, tmp_path):
    parse = recipe_parser(recipe)
    argv = [*ARGV[recipe], "--results-dir", str(tmp_path / "run")]
    path = kept(parse, argv, tmp_path)
    assert without(parse(["--config", str(path)]), "config") == without(parse(argv), "config")


@pytest.mark.parametrize("recipe", ARGV)
def test_a_flag_beside_the_configuration_overrides_it(recipe, tmp_path):
    parse = recipe_parser(recipe)
    path = kept(parse, [*ARGV[recipe], "--seed", "3"], tmp_path)
    again = parse(["--config", str(path), "--seed", "7", "--results-dir", str(tmp_path / "other")])
    assert (again.seed, again.results_dir) == (7, str(tmp_path / "other"))
    assert without(again, "config", "seed", "results_dir", "flags") == without(
        parse([*ARGV[recipe], "--seed", "3"]), "config", "seed", "results_dir", "flags")
    assert again.flags["seed"] == 7  # the rerun keeps what it ran


def test_the_file_holds_every_flag_but_those_that_act_on_a_folder(tmp_path):
    parse = recipe_parser("mnist-cnn")
    flags = parse(["--resume", "--results-dir", str(tmp_path)]).flags
    assert "resume" not in flags and "config" not in flags
    assert {"lr", "batch_size", "launcher", "amp", "target", "seed", "results_dir"} <= flags.keys()


@pytest.mark.parametrize("text, words", [
    ("lr: 0.01\nnot_a_flag: 3\n", ["'not_a_flag' is not a flag of this recipe's configuration"]),
    ("lr: -1\n", ["--lr", "'-1'"]),
    ("resume: true\n", ["'resume' is not a flag of this recipe's configuration"]),
    ("lr: [0.01\n", ["is not YAML"]),
    ("- lr\n", ["does not hold a mapping"]),
])
def test_a_bad_configuration_file_is_one_line_naming_it(tmp_path, capsys, text, words):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit) as stop:
        recipe_parser("mnist-cnn")(["--config", str(path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert_one_error_line(err, f"--config {path}", words[0])
    assert all(word in err for word in words), err


def test_a_missing_configuration_file_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        recipe_parser("mnist-cnn")(["--config", str(tmp_path / "nowhere.yaml")])
    assert_one_error_line(capsys.readouterr().err, f"--config {tmp_path / 'nowhere.yaml'}", "cannot be read")


@pytest.mark.parametrize("recipe", ["mnist-cnn", "cassava-resnet", "cityscapes-unet"])
def test_a_recipe_s_configuration_in_python_is_its_command_line_without_flags(recipe):
    # One place for each default: train.Config() (cityscapes-unet: its full preset) is what train.py runs bare
    import dataclasses

    from helpers import recipe_module

    train = recipe_module(recipe, "train")
    argv = [] if recipe == "cityscapes-unet" else ["--synthetic"]
    parsed = dataclasses.replace(train.parse_args(argv), flags=None)
    made = train.FULL if recipe == "cityscapes-unet" else train.Config(synthetic=True)
    assert parsed == made
