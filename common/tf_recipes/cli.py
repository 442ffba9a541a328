"""The flags every recipe shares, and clean one-line errors for user mistakes. Imports no TensorFlow, so
`train.py --help` and a mistyped flag answer at once, without TensorFlow's start-up log."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from tf_recipes import contract, stopping, user_paths
from tf_recipes import config
from tf_recipes.config import GROUPS, RunConfig, Target, TargetMissed, read_config
from tf_recipes.stopping import peer_error_summary


def argparse_type(parse):
    """`parse` (text -> value, or a ValueError that says what is wrong) as an argparse type, whose error line
    says the same."""

    def typed(text: str):
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    typed.__name__ = parse.__name__
    return typed


# The flags' types (tf_recipes.config's), for the recipes' and the operations' own flags
positive_int, non_negative_int, positive_float, fraction, rate, loss_scale, step_window = map(
    argparse_type,
    (
        config.positive_int,
        config.non_negative_int,
        config.positive_float,
        config.fraction,
        config.rate,
        config.loss_scale,
        config.step_window,
    ),
)


def at_least(minimum: float):
    """A finite number >= minimum (a deadline with a floor, a fault's seconds)."""
    return argparse_type(config.at_least(minimum))


def folder_flags_problem(args) -> str | None:
    """One line when --data-dir or an output folder names a file, overlaps --data-dir or cannot be made."""
    data_dir = getattr(args, "data_dir", None)
    outputs = {
        f"--{dest.replace('_', '-')}": getattr(args, dest, None)
        for dest in ("results_dir", "cache_dir", "predict_dir")
    }
    return (data_dir and user_paths.folder_problem("--data-dir", data_dir)) or user_paths.flags_problem(
        {"--data-dir": data_dir}, outputs
    )


# Flags that act on a results folder rather than say what a run is: RESULTS/config.yaml leaves them out
NOT_KEPT = ("config", "resume")


class TrainingParser(argparse.ArgumentParser):
    """argparse's parser that also refuses, in one line, folder flags that name a file or overlap, and that
    runs a kept configuration: `--config FILE` reads RESULTS/config.yaml as the flags it holds, given before
    the command line's own, which therefore override them. The parsed namespace's `flags` is every flag's
    value as parsed (the configuration RunConfig.flags keeps), before a recipe resolves its preset."""

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        self._texts = {}  # {name: the text a flag was given}: how config.yaml writes a tuple or a target
        kept = self._kept_flags(args)
        namespace, extras = super().parse_known_args([*kept, *args], namespace)
        namespace.flags = {
            name: self._plain(name, value)
            for name, value in sorted(vars(namespace).items())
            if name not in NOT_KEPT and name != "flags"
        }
        user_paths.exit_if(folder_flags_problem(namespace))
        return namespace, extras

    def _get_value(self, action, arg_string):
        value = super()._get_value(action, arg_string)
        self._texts[action.dest] = arg_string
        return value

    def _plain(self, name: str, value):
        """A flag's value as YAML keeps it: a number, text, a boolean or null as it is; else its text."""
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return self._texts.get(name, str(value))

    def _kept_flags(self, args: list[str]) -> list[str]:
        """The flags of --config FILE, if given, checked on their own so that a bad value names the file."""
        finder = argparse.ArgumentParser(add_help=False)
        finder.add_argument("--config")
        if (path := finder.parse_known_args(args)[0].config) is None:
            return []
        self._context = f"--config {path}: "
        try:
            values = read_config(path)
        except ValueError as error:
            self.error(str(error))
        tokens = [token for name, value in values.items() for token in self._flag_tokens(name, value)]
        super().parse_known_args(list(tokens))
        self._context = ""
        return tokens

    def _flag_tokens(self, name: str, value) -> list[str]:
        """The command-line words that give flag `name` its kept `value`."""
        actions = [action for action in self._actions if action.dest == name and action.option_strings]
        if name in NOT_KEPT or not actions:
            self.error(f"{name!r} is not a flag of this recipe's configuration; remove it from the file")
        for action in actions:  # a switch that sets it: --scale-lr/--no-scale-lr, --no-export, --no-amp
            if isinstance(action, argparse.BooleanOptionalAction):  # null: neither, as when not given
                if isinstance(value, bool):
                    return [action.option_strings[not value]]
            elif action.nargs == 0 and type(action.const) is type(value) and action.const == value:
                return [action.option_strings[0]]
        taking = [action for action in actions if action.nargs != 0]
        if value is None or isinstance(value, bool) or not taking:
            if value != actions[0].default:
                self.error(f"{name}: {value!r} is not a value any flag gives it")
            return []
        return [taking[0].option_strings[0], str(value)]

    _context = ""  # what an error line starts with: the configuration file whose flags are being read

    def error(self, message):
        super().error(self._context + message)


def target_type(metrics: tuple[str, ...]):
    """An argparse type for --target METRIC=VALUE, METRIC one of `metrics` or loss (config.Target.parse)."""

    def target(text: str) -> Target:
        return Target.parse(text, metrics)

    target.__name__ = "METRIC=VALUE"
    return argparse_type(target)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each flag's default, but for those without one (None), whose help says what happens."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


def training_parser(
    description: str, metrics: tuple[str, ...] = ("accuracy",), config: type = RunConfig, **defaults
) -> TrainingParser:
    """An argparse parser with --config and one flag for each field of `config`, RunConfig or a recipe's
    subclass of it that adds the recipe's own fields (config.flag: the group of --help, default, help, type;
    `defaults`: the recipe's own defaults of some, such as batch_size; `metrics`: what --target may name
    besides the loss). `configuration(args, config)` makes the run's configuration of what it parses."""
    parser = TrainingParser(description=description, formatter_class=HelpFormatter)
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="run the configuration a run kept (RESULTS/config.yaml) again; the flags given "
        "beside it override its values",
    )
    groups = {name: parser.add_argument_group(name) for name in GROUPS}
    for field in dataclasses.fields(config):
        options = dict(field.metadata)
        if options:
            name = options.pop("group")
            group = groups.get(name) or groups.setdefault(name, parser.add_argument_group(name))
            names = options.pop("names", ("--" + field.name.replace("_", "-"),))
            if "type" in options:
                options["type"] = argparse_type(options["type"])
            if options.get("action") == "negatable":
                options["action"] = argparse.BooleanOptionalAction
            group.add_argument(*names, dest=field.name, default=field.default, **options)
        if field.name == "amp":
            group.add_argument(
                "--no-amp",
                dest="amp",
                action="store_const",
                const=None,
                help="everything in float32 (undoes an --amp given earlier on the command line)",
            )
        if field.name == "target":
            groups["evaluation during training"].add_argument(
                "--target",
                type=target_type(metrics),
                default=None,
                metavar="METRIC=VALUE",
                help="end the run at the first evaluation whose METRIC reaches VALUE (at most VALUE for the "
                f"loss), e.g. {metrics[0]}=0.99; results.json records its time_to_target. A run that "
                f"never reaches it exits with status {contract.EXIT_TARGET_MISSED}",
            )
    parser.set_defaults(**defaults)
    parser.groups = groups  # {title: argparse group}: where a recipe adds a flag that is not a field
    return parser


def is_peer_error(error: BaseException) -> bool:
    """A TensorFlow error that a collective raises when a peer died or froze."""
    return any(
        kind.__name__ in contract.PEER_ERRORS and kind.__module__.startswith("tensorflow")
        for kind in type(error).__mro__
    )


_STATUSES = (
    ((contract.UserError, FileExistsError, FileNotFoundError, FloatingPointError), contract.EXIT_USER_ERROR),
    (contract.DesyncError, contract.EXIT_DESYNC),
    (TargetMissed, contract.EXIT_TARGET_MISSED),
    (contract.ClusterError, contract.EXIT_CLUSTER),
)


def configuration(args, config: type = RunConfig):
    """The run's configuration (`config`: RunConfig or a recipe's subclass) of the flags training_parser
    made: each field is the flag of the same name. The engine never sees `args`."""
    return config(**{field.name: getattr(args, field.name) for field in dataclasses.fields(config)})


def leave(status: int) -> None:
    """Exit with `status`, without waiting for a thread the run left behind
    (tf_recipes.stopping.leave_behind): everything the run promises is written by then."""
    if stopping.left_behind():
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def run_main(main) -> None:
    """Run a recipe's main(); a user's mistake ends in one line on stderr and a contract.EXIT_* status."""
    try:
        main()
        leave(contract.EXIT_DONE)
    except contract.RunFinished:  # the chief has said so; a requeued job or recreated pod ends cleanly
        leave(contract.EXIT_DONE)
    except contract.StopRequested as stop:
        sys.stderr.write(f"{stop}\n")  # one write, as below
        sys.stderr.flush()
        leave(contract.EXIT_STOPPED)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:
        status = next((status for kinds, status in _STATUSES if isinstance(error, kinds)), None)
        if status is None and not is_peer_error(error):
            raise
        message = (
            str(error)
            if status
            else (
                f"lost contact with the other workers ({type(error).__name__}: "
                f"{peer_error_summary(error)}); continue from the last "
                "checkpoint with --resume"
            )
        )
        # One write of the whole line: the processes of a job share the stream, and print writes its end apart
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
        # not sys.exit: TensorFlow's shutdown can wait on a lost peer
        if status in (None, contract.EXIT_CLUSTER):
            os._exit(contract.EXIT_CLUSTER)
        leave(status)
