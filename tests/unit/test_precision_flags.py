"""--amp [DTYPE] and --loss-scale-initial, shared by every recipe (common/tf_recipes/cli.py): what each value means,
and a bad value ends at parse time with one `error:` line naming the flag and the value. What the flags
do in training runs is tests/integration/test_precision.py; the overflow it injects there
(TF_RECIPES_FAULT_OVERFLOW) is checked in tests/unit/test_training_parts.py."""
import pytest

from tf_recipes import config
from helpers import run_python
from test_bad_numbers import RECIPES, assert_parser_refuses, recipe_parser


@pytest.mark.parametrize("amp, gpu, policy", [
    (None, False, "float32"), (None, True, "float32"),
    ("auto", True, "mixed_float16"), ("auto", False, "mixed_bfloat16"),  # what a bare --amp always meant
    ("float16", False, "mixed_float16"), ("float16", True, "mixed_float16"),
    ("bfloat16", False, "mixed_bfloat16"), ("bfloat16", True, "mixed_bfloat16"),
])
def test_the_precision_of_each_amp_value(amp, gpu, policy):
    assert config.precision_policy(amp, gpu) == policy


def test_an_unknown_amp_value_is_refused_by_the_policy_too():
    with pytest.raises(ValueError, match="fp16"):
        config.precision_policy("fp16", gpu=True)


def test_each_policy_names_the_flags_that_ask_for_it_anywhere():
    for amp in (None, "float16", "bfloat16"):
        flags = config.amp_flags(config.precision_policy(amp, gpu=False)).split()
        policy = config.precision_policy(flags[1] if flags[0] == "--amp" else None, gpu=True)
        assert policy == config.precision_policy(amp, gpu=False), (amp, flags)


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_recipe_parses_the_precision_flags(recipe):
    parse = recipe_parser(recipe)
    defaults = parse([])
    assert (defaults.amp, defaults.xla, defaults.loss_scale_initial) == (None, False, 2.0 ** 15)
    assert parse(["--no-amp"]).amp is None and parse(["--amp", "bfloat16", "--no-amp"]).amp is None
    assert parse(["--amp"]).amp == "auto"
    assert (parse(["--amp", "--xla"]).amp, parse(["--amp", "--xla"]).xla) == ("auto", True)
    assert parse(["--amp", "float16"]).amp == "float16" and parse(["--amp=bfloat16"]).amp == "bfloat16"
    assert parse(["--amp", "float16", "--loss-scale-initial", "1048576"]).loss_scale_initial == 1048576.0
    assert parse(["--loss-scale-initial", "1e-3"]).loss_scale_initial == 1e-3  # legal; Keras takes any


@pytest.mark.parametrize("flag, value", [
    ("--amp", "fp16"), ("--amp", "float32"), ("--amp", "mixed_float16"),
    ("--loss-scale-initial", "0"), ("--loss-scale-initial", "-1"), ("--loss-scale-initial", "nan"),
    ("--loss-scale-initial", "inf"), ("--loss-scale-initial", "1e39"), ("--loss-scale-initial", "big"),
])
@pytest.mark.parametrize("recipe", RECIPES)
def test_a_recipe_refuses_a_bad_precision_value(recipe, flag, value, capsys):
    assert_parser_refuses(recipe_parser(recipe), [f"{flag}={value}"], flag, value, capsys)


def test_help_says_what_each_amp_value_means():
    process = run_python("recipes/mnist-cnn/train.py", "--help")
    assert process.returncode == 0, process.stderr
    text = " ".join(process.stdout.split())
    assert "--amp [DTYPE]" in text and "--loss-scale-initial SCALE" in text
    for words in ("float16 with loss scaling on a GPU, bfloat16 on the CPU", "float16 or bfloat16 force that type",
                  "halves it"):
        assert words in text, words
