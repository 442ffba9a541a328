"""Every number taken from a flag is finite and in its range: a bad one ends at parse time with exit
status 2 and one `error:` line that names the flag and the value, before TensorFlow loads and before
any folder is made (issue 25)."""
import sys

import pytest

from helpers import REPO, run_invoke

RECIPES = ["mnist-cnn", "cassava-resnet", "cityscapes-unet"]

# Shared by every train.py (common/tf_recipes/cli.py training_parser).
SHARED = [("--lr", "inf"), ("--lr", "nan"), ("--join-timeout", "inf"), ("--join-timeout", "-1"),
          ("--seed", "-1")]
# The recipes that train on your own photos (common/tf_recipes/image_folder.py add_args).
IMAGE_FOLDER = [("--val-fraction", "1.5"), ("--val-fraction", "0"), ("--val-fraction", "1"),
                ("--val-fraction", "nan")]
CITYSCAPES = [("--dropout", "1.5"), ("--dropout", "1"), ("--dropout", "nan"), ("--dropout", "-0.5"),
              ("--scale", "nan:1"), ("--scale", "0:1"), ("--scale", "1.5:0.5"), ("--scale", "1:inf"),
              ("--crop", "0x0"), ("--eval-size", "64x0")]
RECIPE_CASES = ([(recipe, flag, value) for recipe in RECIPES for flag, value in SHARED]
                + [(recipe, flag, value) for recipe in ("mnist-cnn", "cassava-resnet") for flag, value in IMAGE_FOLDER]
                + [("cityscapes-unet", flag, value) for flag, value in CITYSCAPES])


def recipe_parser(recipe: str):
    """parse_args of recipes/RECIPE/train.py without TensorFlow: only the script's part above its
    `if __name__ == "__main__"` (imports of tf_recipes.cli and the parser) is run."""
    path = REPO / "recipes" / recipe / "train.py"
    source = path.read_text()
    namespace = {"__name__": f"bad_numbers_{recipe.replace('-', '_')}", "__file__": str(path)}
    saved = list(sys.path)
    try:
        exec(compile(source[:source.index('\nif __name__ == "__main__"')], str(path), "exec"), namespace)
    finally:
        sys.path[:] = saved
    return namespace["parse_args"]


def assert_one_error_line(stderr: str, flag: str, value: str) -> None:
    assert "Traceback" not in stderr and "unrecognized arguments" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, stderr
    assert flag in errors[0] and value in errors[0], stderr


def assert_parser_refuses(parse, argv, flag, value, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        parse(argv)
    assert stop.value.code == 2
    assert_one_error_line(capsys.readouterr().err, flag, value)


@pytest.mark.parametrize("recipe, flag, value", RECIPE_CASES)
def test_a_recipe_refuses_a_bad_number(recipe, flag, value, capsys):
    assert_parser_refuses(recipe_parser(recipe), [f"{flag}={value}"], flag, value, capsys)


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_recipe_keeps_its_defaults_and_valid_values(recipe):
    parse = recipe_parser(recipe)
    defaults = parse([])
    assert defaults.lr > 0 and defaults.seed == 42 and defaults.join_timeout == 300.0
    args = parse(["--lr", "0.5", "--seed", "0", "--join-timeout", "30"])
    assert (args.lr, args.seed, args.join_timeout) == (0.5, 0, 30.0)
    if recipe != "cityscapes-unet":
        assert defaults.val_fraction is None and parse(["--val-fraction", "0.2"]).val_fraction == 0.2
    if recipe == "cityscapes-unet":
        assert (defaults.dropout, defaults.scale) == (0.1, (0.5, 2.0))  # the full preset's heads, its zoom
        args = parse(["--dropout", "0.3", "--scale", "1:1", "--crop", "64x128", "--preset", "tiny"])
        assert (args.dropout, args.scale, args.crop) == (0.3, (1.0, 1.0), (64, 128))


@pytest.mark.parametrize("flag, value", [("--deadline", "nan"), ("--deadline", "inf"), ("--sizes", ","),
                                         ("--repeats", "0"), ("--cpu-replicas", "0")])
def test_the_preflight_module_refuses_a_bad_number(flag, value, capsys):
    from tf_recipes.operations import preflight
    assert_parser_refuses(preflight.parse_args, [f"{flag}={value}"], flag, value, capsys)
    defaults = preflight.parse_args([])
    assert (defaults.deadline, defaults.repeats, len(defaults.sizes)) == (120, 3, 4)


@pytest.mark.parametrize("flag, value", [("--batch-size", "0"), ("--top-k", "0"), ("--top-k", "-1")])
def test_predict_refuses_a_bad_count(flag, value, capsys):
    from tf_recipes.operations import predicting
    required = ["--model", "m", "--input", "i", "--out", "o"]
    assert_parser_refuses(predicting.parser("predict").parse_args, [*required, f"{flag}={value}"], flag, value,
                          capsys)
    assert predicting.parser("predict").parse_args(required).batch_size == 32


INVOKE_PREFLIGHT = [("--deadline", "nan"), ("--deadline", "inf"), ("--deadline", "-5"), ("--deadline", "0"),
                    ("--repeats", "0"), ("--repeats", "x"), ("--sizes", "4K,abc"), ("--sizes", "0"),
                    ("--sizes", "-1K")]


@pytest.mark.parametrize("flag, value", INVOKE_PREFLIGHT)
def test_invoke_preflight_refuses_a_bad_number(flag, value, tmp_path):
    results = tmp_path / "results"
    # Not --dry: a dry run makes no folder anyway, so only a real run shows that none is made.
    process = run_invoke("preflight", "mnist-cnn", "--runtime", "local", "--results-dir", str(results),
                         f"{flag}={value}", timeout=120)
    assert process.returncode == 2, process.stdout + process.stderr
    assert process.stdout == "", process.stdout
    assert len(process.stderr.strip().splitlines()) == 1, process.stderr
    assert_one_error_line(process.stderr, flag, value.split(",")[-1])  # the part of --sizes at fault
    assert not results.exists()


@pytest.mark.parametrize("flag", ["--tasks-per-node", "--cpus-per-task"])
def test_invoke_sbatch_refuses_a_zero_count(flag):
    process = run_invoke("sbatch", "mnist-cnn", "--dry", flag, "0", timeout=120)
    assert process.returncode == 2, process.stdout + process.stderr
    assert_one_error_line(process.stderr, flag, "0")
    assert len(process.stderr.strip().splitlines()) == 1, process.stderr


@pytest.mark.parametrize("port", ["0", "-1", "65536", "65535"])
def test_invoke_run_refuses_a_port_base_without_room_for_the_workers(port):
    # Two workers per node need ports PORT and PORT+1; 65535 leaves room for one.
    process = run_invoke("run", "mnist-cnn", "--launcher", "multiworker", "--cpu-replicas", "2", "--runtime", "local",
                         "--hosts", "n1,n2", "--node-index", "0", f"--port-base={port}", "--dry", timeout=120)
    assert process.returncode == 2, process.stdout + process.stderr
    assert process.stdout == "" and len(process.stderr.strip().splitlines()) == 1, process.stderr
    assert_one_error_line(process.stderr, "--port-base", port)


@pytest.mark.parametrize("port", ["0", "65535"])
def test_the_process_starter_refuses_a_port_base_without_room_for_the_workers(port, capsys):
    from tf_recipes.operations import spawn
    with pytest.raises(SystemExit) as stop:
        spawn.main(["--nproc", "2", "--hosts", "n1,n2", "--port-base", port, "--", "true"])
    assert stop.value.code == 2
    assert_one_error_line(capsys.readouterr().err, "--port-base", port)


def test_the_process_starter_refuses_a_negative_gpu_count(capsys):
    from tf_recipes.operations import spawn
    with pytest.raises(SystemExit) as stop:
        spawn.main(["--nproc", "1", "--gpus-per-worker", "-1", "--", "true"])
    assert stop.value.code == 2
    assert_one_error_line(capsys.readouterr().err, "--gpus-per-worker", "-1")
