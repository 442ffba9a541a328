"""The nightly matrix (ci/nightly/matrix.yaml): its cells, their commands and the checks of their results.

Pure functions, but for `load_matrix`, which reads the file: checking the matrix, expanding a tier
into cells, the `invoke run` command of a cell, why a cell cannot run here, which failures are the
infrastructure's (retried once), the per-cell checks (exit, results.json, replicas in sync, loss
down, parity with the reference cell, a quality cell's metric against its floor) and the regression
rule. Running them is ci/nightly/runner.py;
the report files are ci/nightly/report.py.
"""
from __future__ import annotations

import fnmatch
import re
import shlex
import statistics
from dataclasses import dataclass, field

import yaml

from commands.choices import BASES, RUNTIMES, STACK_BASES
from tf_recipes.contract import DEFAULT_STACK, RESULT_FIELDS, STACK_LAUNCHERS, STACKS

TIERS = ("smoke", "cpu", "gpu")
# Parity tolerances of tests/integration/test_mnist_launchers.py: float32 sums in another order move the last
# bits; a launcher that averages wrongly or trains on its own half batch moves far more.
LOSS_RTOL = 1e-3
WEIGHT_ATOL = 1e-3
LOSS_WINDOW_PARTS = 4  # the "loss went down" check compares the first and last quarter of the curve
# Failures that are the machine's, not the recipe's: these, and only these, are retried once.
INFRASTRUCTURE_ERRORS = (
    ("the Docker daemon", r"Cannot connect to the Docker daemon|error during connect|"
                          r"Error response from daemon: (?!.*rlimit)|dial unix .*docker\.sock"),
    ("a port in use", r"[Aa]ddress already in use|port is already allocated|EADDRINUSE"),
    ("an image pull", r"error pulling image|failed to (?:pull|resolve|fetch)|toomanyrequests|"
                      r"manifest unknown|TLS handshake timeout|net/http: request canceled"),
)


class MatrixError(ValueError):
    """ci/nightly/matrix.yaml (or a --matrix file) that cannot be used; the message names the key."""


class NothingToRun(MatrixError):
    """A tier meant for GPUs (`gpus: true`) on a machine where none of its cells can run."""


@dataclass(frozen=True)
class Cell:
    recipe: str
    launcher: str
    runtime: str
    base: str
    tier: str
    replicas: int
    gpus: int
    launcher_flags: tuple[str, ...]
    train_args: tuple[str, ...]
    global_batch: int
    time_limit: float
    reference: str  # the launcher of the recipe's reference cell
    parity: bool = True  # compared with the reference cell (false: the recipe's `no_parity` launchers)
    stack: str = DEFAULT_STACK  # stacks/STACK.txt: the software the image holds
    env: tuple[tuple[str, str], ...] = ()  # (NAME, VALUE) for `invoke run`'s environment: the launcher's `env`
    # A quality cell (its recipe's `quality` entry in the matrix): (results.json metric path, floor); None for
    # the launcher cells.
    quality: tuple[str, float] | None = None
    own_data: bool = False  # a quality cell whose entry has data of its own (`data`, `copy`), not its recipe's

    @property
    def kind(self) -> str:
        """`cell` (a launcher cell, held to its reference) or `quality` (a metric held to a floor)."""
        return "quality" if self.quality else "cell"

    @property
    def data_key(self) -> str:
        """Whose data it trains on: its recipe's (RECIPE), or its quality entry's own (RECIPE/quality)."""
        return f"{self.recipe}/quality" if self.own_data else self.recipe

    @property
    def image(self) -> str:
        """The image variant, as in its tag: `cpu`, `ngc` on the default stack; `current-cpu` on another."""
        return self.base if self.stack == DEFAULT_STACK else f"{self.stack}-{self.base}"

    @property
    def id(self) -> str:
        return f"{self.recipe}/{'quality' if self.quality else self.launcher}/{self.runtime}/{self.image}"

    @property
    def reference_id(self) -> str:
        return f"{self.recipe}/{self.reference}/{self.runtime}/{self.image}"

    @property
    def is_reference(self) -> bool:
        return self.launcher == self.reference

    @property
    def docker_id(self) -> str:
        """The same cell under Docker, in the image an Apptainer cell's SIF is made from."""
        return f"{self.recipe}/{self.launcher}/docker/{self.image}"

    @property
    def single_id(self) -> str:
        """The recipe's single-device cell: the denominator of the speed ratio."""
        return f"{self.recipe}/single/{self.runtime}/{self.image}"


@dataclass(frozen=True)
class ReadmeCommand:
    file: str
    match: str
    time_limit: float

    @property
    def id(self) -> str:
        return f"{self.file}: {self.match}"


@dataclass(frozen=True)
class Matrix:
    path: str
    launchers: dict
    recipes: dict
    tiers: dict
    readme: list = field(default_factory=list)
    regression: dict = field(default_factory=dict)
    quality: dict = field(default_factory=dict)  # recipe: its quality entry (checked by _check_quality)

    def data_spec(self, key: str) -> dict:
        """The data of a Cell.data_key: `data` (commands run in turn) and `copy` (files copied from a folder)."""
        recipe, _, quality = key.partition("/")
        spec = self.quality[recipe] if quality else self.recipes[recipe]
        return {"data": spec.get("data") or [], "copy": spec.get("copy")}


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_env(env, where: str) -> None:
    """A launcher's `env`: a mapping of environment variable names to plain values (such as the control
    cells' TF_RECIPES_FAULT_* variables, injected by python -m tf_recipes.operations.faults)."""
    if not isinstance(env, dict):
        raise MatrixError(f"{where}.env: expected a mapping of environment variables to values, got {env!r}")
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise MatrixError(f"{where}.env: {name!r} is not an environment variable name (letters, digits, _)")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise MatrixError(f"{where}.env.{name}: expected a string or a number, got {value!r}")


def _need(mapping, key, kind, where):
    if not isinstance(mapping, dict) or key not in mapping:
        raise MatrixError(f"{where}: missing `{key}`")
    value = mapping[key]
    if not isinstance(value, kind):
        raise MatrixError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _check_tier(path: str, name: str, spec: dict, launchers: dict, recipes: dict) -> None:
    """A tier's keys name known recipes, launchers, runtimes, bases and stacks, and every recipe's
    reference launcher runs in it on every stack."""
    where = f"{path}: tiers.{name}"
    if name not in TIERS:
        raise MatrixError(f"{where}: unknown tier; the tiers are {', '.join(TIERS)}")
    for key, known, choices in (("recipes", recipes, None), ("launchers", launchers, None),
                                ("runtimes", None, RUNTIMES), ("bases", None, BASES)):
        for value in _need(spec, key, list, where):
            if value not in (known if known is not None else choices):
                raise MatrixError(f"{where}.{key}: unknown {key[:-1]} {value!r}")
    for stack in spec.setdefault("stacks", [DEFAULT_STACK]):
        if stack not in STACKS:
            raise MatrixError(f"{where}.stacks: unknown stack {stack!r}; the stacks are {', '.join(STACKS)}")
        if not set(spec["bases"]) & set(STACK_BASES[stack]):
            raise MatrixError(f"{where}: none of its bases is one of the {stack} stack's "
                              f"({', '.join(STACK_BASES[stack])})")
    for recipe in spec["recipes"]:
        if recipes[recipe]["reference"] not in spec["launchers"]:
            raise MatrixError(f"{where}: {recipe}'s reference launcher {recipes[recipe]['reference']!r} "
                              "is not among the tier's launchers")
        for stack in spec["stacks"]:
            if not runs_on(launchers, recipes[recipe]["reference"], stack):
                raise MatrixError(f"{where}: {recipe}'s reference launcher {recipes[recipe]['reference']!r} "
                                  f"does not run on the {stack} stack")


QUALITY_KEYS = {"tiers", "launcher", "runtime", "base", "global_batch", "args", "metric", "floor", "time_limit",
                "data", "copy"}


def _check_quality(path: str, data: dict, launchers: dict, recipes: dict, tiers: dict) -> dict:
    """`quality`: per recipe, one cell in each tier named that trains it for quality and holds a metric of
    results.json (a dotted path, such as final_metrics.test.accuracy) to a floor."""
    quality = data.get("quality") or {}
    if not isinstance(quality, dict):
        raise MatrixError(f"{path}: quality: expected a mapping of recipes to quality cells")
    for recipe, spec in quality.items():
        where = f"{path}: quality.{recipe}"
        if recipe not in recipes:
            raise MatrixError(f"{where}: {recipe!r} is not one of the matrix's recipes")
        if not isinstance(spec, dict):
            raise MatrixError(f"{where}: expected a mapping")
        unknown = sorted(set(spec) - QUALITY_KEYS)
        if unknown:
            raise MatrixError(f"{where}: unknown key {unknown[0]!r}; the keys are {', '.join(sorted(QUALITY_KEYS))}")
        for key, kind in (("tiers", list), ("launcher", str), ("runtime", str), ("base", str), ("global_batch", int),
                          ("args", list), ("metric", str), ("floor", (int, float)), ("time_limit", (int, float))):
            _need(spec, key, kind, where)
        if isinstance(spec["floor"], bool) or "" in spec["metric"].split("."):
            raise MatrixError(f"{where}: expected a metric path such as final_metrics.test.accuracy and a number "
                              "as its floor")
        if spec["launcher"] not in launchers:
            raise MatrixError(f"{where}.launcher: {spec['launcher']!r} is not a launcher ({', '.join(launchers)})")
        if spec["global_batch"] % launchers[spec["launcher"]]["replicas"]:
            raise MatrixError(f"{where}.global_batch: {spec['global_batch']} does not split over the "
                              f"{spec['launcher']} launcher's replicas")
        for tier in spec["tiers"]:
            if tier not in tiers:
                raise MatrixError(f"{where}.tiers: {tier!r} is not a tier of the matrix")
            for key in ("runtime", "base"):
                if spec[key] not in tiers[tier][key + "s"]:
                    raise MatrixError(f"{where}.{key}: {spec[key]!r} is not one of tier {tier}'s {key}s")
        for command in spec.get("data") or []:
            if not isinstance(command, list) or not command:
                raise MatrixError(f"{where}.data: every step is a command as a list of words")
        copy = spec.get("copy")
        if copy is not None:
            for key in ("files", "default", "what", "env"):
                _need(copy, key, list if key == "files" else str, f"{where}.copy")
            if not ENV_NAME.fullmatch(copy["env"]):
                raise MatrixError(f"{where}.copy.env: {copy['env']!r} is not an environment variable name")
    return quality


def load_matrix(path: str) -> Matrix:
    """Read and check a matrix file; every mistake is one MatrixError naming the file and key."""
    try:
        with open(path) as handle:
            data = yaml.safe_load(handle)
    except OSError as error:
        raise MatrixError(f"cannot read the matrix {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise MatrixError(f"{path} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise MatrixError(f"{path}: expected a mapping with launchers, recipes and tiers")
    launchers = _need(data, "launchers", dict, path)
    recipes = _need(data, "recipes", dict, path)
    tiers = _need(data, "tiers", dict, path)
    for name, spec in launchers.items():
        _need(spec, "replicas", int, f"{path}: launchers.{name}")
        _need(spec, "flags", list, f"{path}: launchers.{name}")
        if not isinstance(spec.get("args", []), list):
            raise MatrixError(f"{path}: launchers.{name}.args: expected a list of train.py arguments")
        _check_env(spec.get("env", {}), f"{path}: launchers.{name}")
    for name, spec in recipes.items():
        where = f"{path}: recipes.{name}"
        _need(spec, "global_batch", int, where)
        _need(spec, "args", list, where)
        _need(spec, "time_limit", (int, float), where)
        reference = _need(spec, "reference", str, where)
        if reference not in launchers:
            raise MatrixError(f"{where}.reference: {reference!r} is not a launcher ({', '.join(launchers)})")
        for launcher in spec.get("no_parity", []):
            if launcher not in launchers:
                raise MatrixError(f"{where}.no_parity: {launcher!r} is not a launcher")
        for command in spec.get("data") or []:
            if not isinstance(command, list) or not command:
                raise MatrixError(f"{where}.data: every step is a command as a list of words")
    for name, spec in tiers.items():
        _check_tier(path, name, spec, launchers, recipes)
    readme = []
    for index, entry in enumerate(data.get("readme") or []):
        where = f"{path}: readme[{index}]"
        readme.append((ReadmeCommand(_need(entry, "file", str, where), _need(entry, "match", str, where),
                                     float(_need(entry, "time_limit", (int, float), where))),
                       tuple(_need(entry, "tiers", list, where))))
    regression = {"window": 7, "min_nights": 3, "drop": 0.25, **(data.get("regression") or {})}
    quality = _check_quality(path, data, launchers, recipes, tiers)
    return Matrix(path, launchers, recipes, tiers, readme, regression, quality)


def runs_on(launchers: dict, launcher: str, stack: str) -> bool:
    """Whether the matrix's launcher (its `--launcher` flag) is one of the stack's."""
    flags = [str(flag) for flag in launchers[launcher]["flags"]]
    name = flags[flags.index("--launcher") + 1] if "--launcher" in flags[:-1] else launcher
    return name in STACK_LAUNCHERS[stack]


def expand(matrix: Matrix, tier: str) -> list[Cell]:
    """Every cell of a tier, in the file's order: recipe, then stack, runtime, base and launcher. A
    stack gets the tier's bases and launchers that it has (no horovod on the current stack)."""
    if tier not in matrix.tiers:
        raise MatrixError(f"{matrix.path} has no tier {tier!r}; it has {', '.join(matrix.tiers)}")
    spec = matrix.tiers[tier]
    cells = []
    combinations = ((recipe, stack, runtime, base, launcher) for recipe in spec["recipes"]
                    for stack in spec.get("stacks", [DEFAULT_STACK]) for runtime in spec["runtimes"]
                    for base in spec["bases"] if base in STACK_BASES[stack]
                    for launcher in spec["launchers"] if runs_on(matrix.launchers, launcher, stack))
    for recipe, stack, runtime, base, launcher in combinations:
        recipe_spec = matrix.recipes[recipe]
        replicas = matrix.launchers[launcher]["replicas"]
        if recipe_spec["global_batch"] % replicas:
            raise MatrixError(f"{matrix.path}: recipes.{recipe}.global_batch "
                              f"{recipe_spec['global_batch']} does not split over {replicas} replicas")
        cells.append(Cell(
            recipe=recipe, launcher=launcher, runtime=runtime, base=base, tier=tier,
            replicas=replicas, gpus=replicas if spec.get("gpus") else 0,
            launcher_flags=tuple(str(f) for f in matrix.launchers[launcher]["flags"]),
            train_args=tuple(str(a) for a in [*recipe_spec["args"], *matrix.launchers[launcher].get("args", [])]),
            global_batch=recipe_spec["global_batch"], time_limit=float(recipe_spec["time_limit"]),
            reference=recipe_spec["reference"],
            parity=launcher not in recipe_spec.get("no_parity", []), stack=stack,
            env=tuple((name, str(value)) for name, value in matrix.launchers[launcher].get("env", {}).items())))
    return cells + quality_cells(matrix, tier)


def quality_cells(matrix: Matrix, tier: str) -> list[Cell]:
    """The tier's quality cells, after its launcher cells: one per recipe whose `quality` entry names the
    tier, on the tier's first stack, compared with no other cell."""
    spec = matrix.tiers[tier]
    cells = []
    for recipe in spec["recipes"]:
        entry = matrix.quality.get(recipe)
        if not entry or tier not in entry["tiers"]:
            continue
        launcher = matrix.launchers[entry["launcher"]]
        replicas = launcher["replicas"]
        cells.append(Cell(
            recipe=recipe, launcher=entry["launcher"], runtime=entry["runtime"], base=entry["base"], tier=tier,
            replicas=replicas, gpus=replicas if spec.get("gpus") else 0,
            launcher_flags=tuple(str(f) for f in launcher["flags"]),
            train_args=tuple(str(a) for a in entry["args"]), global_batch=entry["global_batch"],
            time_limit=float(entry["time_limit"]), reference=entry["launcher"], parity=False,
            stack=spec.get("stacks", [DEFAULT_STACK])[0], quality=(entry["metric"], float(entry["floor"])),
            own_data=bool(entry.get("data") or entry.get("copy"))))
    return cells


def readme_commands(matrix: Matrix, tier: str) -> list[ReadmeCommand]:
    return [command for command, tiers in matrix.readme if tier in tiers]


def plan_night(matrix: Matrix, tier: str, only: str | None) -> tuple[list[Cell], list[ReadmeCommand]]:
    """The cells and README commands a night runs (with --only: the matching cells, no README)."""
    cells = select(expand(matrix, tier), only)
    readme = [] if only else readme_commands(matrix, tier)
    if not cells and not readme:
        raise MatrixError(f"--only {only!r} matches no cell of tier {tier}")
    return cells, readme


def select(cells: list[Cell], only: str | None) -> list[Cell]:
    """Cells whose id matches the glob or contains the text `only`, plus the reference and
    single-device cells they are compared with (and, for Apptainer cells, those cells' Docker twins)."""
    if not only:
        return cells
    chosen = {c.id for c in cells if fnmatch.fnmatch(c.id, only) or only in c.id}
    compared = [c for c in cells if c.id in chosen and not c.quality]  # a quality cell brings no other cell
    wanted = chosen | {c.reference_id for c in compared} | {c.single_id for c in compared}
    wanted |= {c.docker_id for c in cells if c.id in wanted and c.runtime == "apptainer"}
    return [c for c in cells if c.id in wanted]


def cell_command(cell: Cell, results_dir: str, data_dir: str | None,
                 invoke: tuple[str, ...] = ("invoke",)) -> list[str]:
    """The `invoke run` command of a cell, as a user would type it; with the launcher's `env`, after
    `env NAME=VALUE ...`, so that the command run and the command shown are one."""
    count = ["--gpus", str(cell.gpus)] if cell.gpus else ["--gpus", "0", "--cpu-replicas", str(cell.replicas)]
    data = ["--data-dir", data_dir] if data_dir else []
    env = ["env", *(f"{name}={value}" for name, value in cell.env)] if cell.env else []
    return [*env, *invoke, "run", cell.recipe, *count, *cell.launcher_flags, "--runtime", cell.runtime,
            "--stack", cell.stack, "--base", cell.base, *data, "--results-dir", results_dir, "--",
            *cell.train_args, "--batch-size", str(cell.global_batch // cell.replicas)]


def not_runnable(cell: Cell, facts: dict) -> str | None:
    """Why a cell cannot run on this machine (None: it can). `facts`: docker (an engine answers),
    apptainer (`apptainer version` answers), gpus (count), ngc (the NGC base is here or can be pulled),
    gpu (TensorFlow's GPU image of the current stack is here or can be pulled)."""
    if cell.gpus > facts.get("gpus", 0):
        return f"needs {cell.gpus} GPU(s); this machine has {facts.get('gpus', 0)}"
    if cell.runtime == "docker" and not facts.get("docker"):
        return "no Docker engine answers"
    if cell.runtime == "apptainer" and not facts.get("apptainer"):
        return "Apptainer does not run here (no `apptainer` answers; on Debian 12, `bash ci/apptainer.sh` provides one)"
    if cell.runtime == "apptainer" and not facts.get("docker"):
        return "no Docker engine answers, and the SIF is made from the recipe's Docker image"
    if cell.base == "ngc" and not facts.get("ngc"):
        return "the NGC base image is neither here nor pullable"
    if cell.base == "gpu" and not facts.get("gpu"):
        return "TensorFlow's GPU image is neither here nor pullable"
    return None


def nothing_runnable(cells: list[Cell], facts: dict, tier: str) -> str | None:
    """The one-line reason when not one of the tier's cells can run here (None: some can)."""
    reasons = [not_runnable(cell, facts) for cell in cells]
    if not cells or not all(reasons):
        return None
    counted = ", ".join(f"{reasons.count(r)} {'cell' if reasons.count(r) == 1 else 'cells'}: {r}"
                        for r in dict.fromkeys(reasons))
    lacking = [what for what, missing in (("no GPU (nvidia-smi lists none)", not facts.get("gpus")),
                                          ("no NGC base image",
                                           any(c.base == "ngc" for c in cells) and not facts.get("ngc")),
                                          ("no TensorFlow GPU image",
                                           any(c.base == "gpu" for c in cells) and not facts.get("gpu")))
               if missing]
    return (f"tier {tier} ran nothing: none of its {len(cells)} cells can run on this machine"
            f"{' (' + '; '.join(lacking) + ')' if lacking else ''}; {counted}")


def infrastructure_error(output: str) -> str | None:
    """Which kind of infrastructure failure the output shows (None: none, so not retried)."""
    for name, pattern in INFRASTRUCTURE_ERRORS:
        if re.search(pattern, output):
            return name
    return None


def find_readme_line(lines: list[str], command: ReadmeCommand) -> str:
    """The one README shell line that contains the entry's text."""
    found = [line for line in lines if command.match in line]
    if len(found) != 1:
        where = "no" if not found else f"{len(found)}"
        raise MatrixError(f"{command.file}: {where} shell lines contain {command.match!r}; "
                          "update the readme entry in the matrix to the README as it is")
    return found[0]


def shell_lines(text: str):
    """Commands in a Markdown text's ```bash/sh/console blocks: continuation lines joined, `$ `
    prompts and comment lines dropped."""
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, flags=re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip().removeprefix("$ ")
            if line and not line.startswith("#"):
                yield line


# -- checks ------------------------------------------------------------------------------------------

def loss_windows(losses: list[float]) -> tuple[float, float]:
    """The mean loss of the first and of the last LOSS_WINDOW_PARTS-th of the logged losses (at
    least one each): a curve that learns goes down between them, whatever one noisy step does."""
    width = max(1, len(losses) // LOSS_WINDOW_PARTS)
    return sum(losses[:width]) / width, sum(losses[-width:]) / width


def check_results(cell: Cell, results: dict | None) -> list[str]:
    """What is wrong with a finished cell's results.json (empty: nothing)."""
    if results is None:
        return ["no results.json"]
    problems = []
    missing = sorted(RESULT_FIELDS - results.keys())
    if missing:
        problems.append(f"results.json lacks {', '.join(missing)}")
        return problems
    if results["replicas"] != cell.replicas:
        problems.append(f"{results['replicas']} replicas, expected {cell.replicas}")
    if results["global_batch"] != cell.global_batch:
        problems.append(f"global batch {results['global_batch']}, expected {cell.global_batch}")
    prints = results["replica_fingerprints"]
    if len(prints) != cell.replicas or len(set(prints)) != 1:
        problems.append(f"replicas out of sync: fingerprints {prints}")
    losses = [entry["loss"] for entry in results["losses"]]
    if len(losses) < 2:
        problems.append(f"{len(losses)} logged losses; need at least 2 to see the loss go down")
    else:
        first, last = loss_windows(losses)
        if not last < first:
            steps = [entry["step"] for entry in results["losses"]]
            width = max(1, len(losses) // LOSS_WINDOW_PARTS)
            problems.append(f"the loss did not go down: mean {first:.4g} over steps {steps[0]}-{steps[width - 1]}, "
                            f"mean {last:.4g} over steps {steps[-width]}-{steps[-1]}")
    return problems


def metric_value(results: dict, path: str):
    """The value at a dotted path of results.json (final_metrics.test.accuracy), or None when it is absent."""
    value = results
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def check_quality(results: dict | None, metric: str, floor: float) -> tuple[float | None, list[str]]:
    """A quality cell's metric against its floor: (the value, None when results.json lacks a number there;
    the problems, none when the value is at or above the floor). A missing metric fails, as does NaN."""
    value = metric_value(results or {}, metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        shown = "missing" if value is None else f"not a number ({value!r})"
        return None, [f"quality: {metric} is {shown} in results.json (floor {floor:g})"]
    if value < floor:
        return float(value), [f"quality: {metric} {value:.4f} is below its floor {floor:g}"]
    return float(value), []


def check_parity(results: dict, weights: dict, reference: dict, reference_weights: dict) -> list[str]:
    """A cell against its recipe's reference cell: same global batch and logged steps, losses within
    LOSS_RTOL and every weight within WEIGHT_ATOL (arrays by name, as in final.weights.h5)."""
    import numpy as np

    if results["global_batch"] != reference["global_batch"]:
        return [f"global batch {results['global_batch']} differs from the reference's {reference['global_batch']}"]
    steps = [e["step"] for e in results["losses"]]
    if steps != [e["step"] for e in reference["losses"]]:
        return [f"logged steps {steps} differ from the reference's"]
    problems = []
    mine = np.array([e["loss"] for e in results["losses"]])
    theirs = np.array([e["loss"] for e in reference["losses"]])
    if not np.allclose(mine, theirs, rtol=LOSS_RTOL, atol=0):
        worst = int(np.argmax(np.abs(mine - theirs) / np.abs(theirs)))
        problems.append(f"loss curve differs from the reference: {mine[worst]:.6g} against {theirs[worst]:.6g} "
                        f"at step {steps[worst]} (rtol {LOSS_RTOL})")
    if weights.keys() != reference_weights.keys() or not weights:
        problems.append("final weights hold other arrays than the reference's")
        return problems
    for name in sorted(weights):
        a, b = weights[name], reference_weights[name]
        if a.shape != b.shape or not np.allclose(a, b, rtol=0, atol=WEIGHT_ATOL):
            gap = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("inf")
            problems.append(f"final weights differ from the reference: {name} by up to {gap:.3g} (atol {WEIGHT_ATOL})")
            break
    return problems


# -- speed: ratios within a night, judged against recent nights -----------------------------------

def ratios(rates: dict[str, float | None], cells: list[Cell]) -> dict[str, float]:
    """Each passed cell's images/s divided by its recipe's single-device cell's, same night."""
    out = {}
    for cell in cells:
        rate, single = rates.get(cell.id), rates.get(cell.single_id)
        if rate and single and cell.id != cell.single_id:
            out[cell.id] = rate / single
    return out


def past_ratios(cell_id: str, nights: list[dict], tier: str, window: int) -> list[float]:
    """The cell's ratios in the last `window` nights of the tier in which it passed, oldest first."""
    return [n["cells"][cell_id]["ratio"] for n in nights
            if n.get("tier") == tier and n["cells"].get(cell_id, {}).get("status") == "pass"
            and n["cells"][cell_id].get("ratio")][-window:]


def regressions(tonight: dict[str, float], nights: list[dict], tier: str, rule: dict) -> list[dict]:
    """Cells whose ratio tonight is more than rule['drop'] below the median of their ratios over
    the last rule['window'] earlier nights of the tier where they passed (at least
    rule['min_nights'] of them). `nights`: history records, oldest first."""
    found = []
    for cell_id, ratio in sorted(tonight.items()):
        past = past_ratios(cell_id, nights, tier, rule["window"])
        if len(past) < rule["min_nights"]:
            continue
        baseline = statistics.median(past)
        if ratio < baseline * (1 - rule["drop"]):
            found.append({"cell": cell_id, "ratio": ratio, "baseline": baseline, "nights": len(past),
                          "change": ratio / baseline - 1})
    return found


def regression_problem(regression: dict, rule: dict) -> str:
    return (f"throughput regression: {regression['ratio']:.3f} of the single-device cell's images/s, "
            f"{-regression['change']:.0%} below the median {regression['baseline']:.3f} of the last "
            f"{regression['nights']} nights (rule: more than {rule['drop']:.0%} below)")


def change_against_history(cell_id: str, ratio: float | None, nights: list[dict], tier: str,
                           window: int) -> float | None:
    """Tonight's ratio against the median of the last `window` passed nights (None: no history)."""
    past = past_ratios(cell_id, nights, tier, window)
    if ratio is None or not past:
        return None
    return ratio / statistics.median(past) - 1


def quote(argv) -> str:
    return shlex.join(str(a) for a in argv)
