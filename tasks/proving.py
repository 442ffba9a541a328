"""`invoke nightly`, `invoke bench` and `invoke results`: how the recipes are proven. The work is in
ci/nightly, ci/bench and ci/results.py; these tasks parse the flags and hand over the settings `invoke run`
uses."""
from __future__ import annotations

import datetime
import os
import shlex
import sys

from invoke import Exit, task

from commands import launch
from tf_recipes import contract, user_paths
from tf_recipes.contract import LAUNCHERS
from tasks import host

EVERY_LAUNCHER = ",".join(LAUNCHERS)  # what `invoke bench --launchers` measures unless told


@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/",
        "replicas": "replica counts to measure, comma-separated (default 1,2,4 on the CPU; 1,2,4,8 up to --gpus)",
        "launchers": "launchers to measure, comma-separated (single runs only at 1 replica)",
        "rounds": "interleaved rounds; the median of the rounds is reported",
        "gpus": "GPUs on this machine; 0 measures CPU replicas (--cpu-replicas)",
        "out": "folder for bench.md, bench.json and bench.png (default results/bench/RECIPE-TIME)",
        "input-benchmark": "also run the recipe's benchmark_input.py and compare its rates with training",
        "input-args": "arguments for benchmark_input.py (quoted), besides the --json it always gets",
        "keep-runs": "keep every run's results folder and log under OUT/runs",
        "dry": "print the commands, run nothing",
    },
)
def bench(c, recipe, replicas=None, launchers=EVERY_LAUNCHER, rounds="3", gpus="0", out=None,
          input_benchmark=True, input_args="", keep_runs=False, dry=False):
    """Measure RECIPE's images/s under every launcher and replica count; arguments after -- go to train.py."""
    from ci.bench import plan, report, runner

    try:
        host.check_recipe(recipe, "bench")
        gpus = launch.parse_count("--gpus", gpus)
        counts = plan.parse_replicas(replicas) if replicas else plan.default_replicas(gpus)
        rounds = launch.parse_count("--rounds", rounds)
        train_args = plan.train_args_for(recipe, shlex.split(c.remainder or ""))
        out = os.path.abspath(out or os.path.join(host.ROOT, "results", "bench", f"{recipe}-{host.stamp()}"))
        problem = user_paths.flags_problem({}, {"--out": out}, creatable=False)
        if problem:
            host.fail(problem)
        host.check_creatable("--out", out, dry)
        runs = plan.plan_runs(recipe, plan.parse_launchers(launchers), counts, rounds, train_args,
                              os.path.join(out, "runs"), gpus=gpus, python=sys.executable,
                              horovodrun=host.local_horovodrun())
    except launch.LaunchError as error:
        host.fail(str(error))
    input_command = runner.input_command_here(recipe, host.ROOT, os.path.join(out, "input-benchmark.json"),
                                              shlex.split(input_args), sys.executable) if input_benchmark else None
    if dry:
        for run in runs:
            host.show(run.argv, run.env)
        if input_command:
            host.show(input_command)
        print(f"would write {out}/bench.md, bench.json and bench.png ({len(runs)} training runs)")
        return
    result, paths, failed = runner.run_bench(
        recipe, runs, rounds=rounds, gpus=gpus, train_args=train_args, out=out, root=host.ROOT,
        input_command=input_command, command=host.command_line("bench", f"invoke bench {recipe}"),
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        git_revision=host.git_revision(), keep_runs=keep_runs)
    print(report.render_markdown(result), end="")
    if failed:
        raise Exit(f"{len(failed)} of {len(runs)} runs failed (logs in {os.path.join(out, 'runs')}); "
                   f"wrote {', '.join(paths.values())}", code=1)
    print(f"wrote {', '.join(paths.values())}")


@task(
    auto_shortflags=False,
    help={
        "tier": "smoke | cpu | gpu (ci/nightly/matrix.yaml)",
        "only": "run only the cells whose id (RECIPE/LAUNCHER/RUNTIME/BASE) matches this glob or text, "
                "plus the cells they are compared with",
        "history": "folder of per-night JSON files: read for the regression rule, tonight's record added",
        "out": "folder for report.json, junit.xml, summary.md and history.png (default results/nightly/TIER)",
        "matrix": "the matrix file",
        "table": "print the matrix table of docs/nightly.md, rendered from the matrix file; run nothing",
        "suite": "instead of a tier's cells, the test suite's full tier (bash ci/test.sh --full: as root, like the "
                 "suite), its report in --out (default results/nightly/suite; docs/nightly/suite keeps the last)",
        "dry": "list the cells and their commands, run nothing",
    },
)
def nightly(c, tier="smoke", only=None, history=None, out=None, matrix="ci/nightly/matrix.yaml", table=False,
            suite=False, dry=False):
    """Build the images, run every cell of a tier and the README commands, check them, write the report;
    or, with --suite, the test suite's full tier and its report."""
    from ci.nightly import matrix as matrix_file, report, runner

    if suite:
        out = os.path.abspath(out or os.path.join(host.ROOT, "results", "nightly", "suite"))
        host.check_creatable("--out", out, dry)
        code = host.execute(["bash", "ci/test.sh", "--full", "--report", out], dry=dry, cwd=host.ROOT)
        if code:
            raise Exit(f"the full tier is red; see {os.path.join(out, 'summary.md')}", code=code)
        return

    out = os.path.abspath(out or os.path.join(host.ROOT, "results", "nightly", tier))
    problem = (user_paths.file_problem("--matrix", os.path.join(host.ROOT, matrix))
               or (history and user_paths.folder_problem("--history", history))
               or user_paths.flags_problem({"--history": history}, {"--out": out}, creatable=False))
    if problem:  # the matrix and the history are read, never opened unless files: a FIFO would block the night
        host.fail(problem)
    if not table:
        host.check_creatable("--out", out, dry)
        host.check_creatable("--history", history, dry)
    try:
        loaded = matrix_file.load_matrix(os.path.join(host.ROOT, matrix))
        if table:
            print(report.render_matrix_table(loaded), end="")
            return
        docker = host.docker_client(c)
        images = {**{key: host.settings(c)[key] for key in ("ngc_base", "cpu_base", "debian_base")},
                  "current_gpu_base": host.base_image(c, "current", "gpu"),
                  "current_cpu_base": host.base_image(c, "current", "cpu"), "docker": docker}
        code = runner.run_night(loaded, tier, only, out, history and os.path.abspath(history), dry,
                                host.command_line("nightly", f"invoke nightly --tier {tier}"), images,
                                docker_answers=not dry and host.docker_engine_answers(docker))
    except matrix_file.MatrixError as error:
        host.fail(str(error))
    if code:
        raise Exit(f"the night is red; see {os.path.join(out, 'summary.md')}", code=code)


@task(
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/ (mnist-cnn, cityscapes-unet, cassava-resnet)",
        "data-dir": "the data of the recipe's documented run (its README's Results section says which)",
        "from": "a results folder of that run, already made: keep its results.json, train nothing",
        "launcher": "the same run under mirrored, multiworker or horovod, on 2 replicas (mnist-cnn): a row of "
                    "its own, kept in docs/results/RECIPE/LAUNCHER",
        "dry": "print the training command, run nothing",
    },
)
def results(c, recipe, data_dir=None, from_=None, launcher=None, dry=False):
    """Train RECIPE's documented run, keep its results.json and curve in docs/results/RECIPE, and write the
    Results section of its README (the table and the learning curve)."""
    from ci import results as kept

    host.check_recipe(recipe, "results")
    if recipe not in kept.RECIPES:
        host.fail(f"{recipe} has no documented results run (ci/results.py RECIPES: {', '.join(kept.RECIPES)})")
    replicated = kept.RECIPES[recipe].get("replicated")
    if launcher and not (replicated and launcher in kept.LAUNCHERS):
        host.fail(f"--launcher {launcher}: {recipe}'s Results have runs under "
                  + (f"{', '.join(kept.LAUNCHERS)} (or none, for one device)" if replicated else "one device only"))
    if not from_:
        if not data_dir:
            host.fail(f"invoke results {recipe}: give --data-dir (the data of its documented run) or --from "
                      "(a results folder of that run)")
        problem = user_paths.folder_problem("--data-dir", data_dir)
        if problem:
            host.fail(problem)
        from_ = os.path.join(host.ROOT, "results", "results", f"{recipe}-{host.stamp()}")
        argv = [sys.executable, "-m", "invoke", "run", recipe, *kept.run_args(recipe, data_dir, from_, launcher)]
        status = host.execute(argv, dry=dry)
        if dry:
            print(f"would keep {from_}/results.json in {os.path.relpath(kept.kept_dir(recipe, launcher), host.ROOT)} "
                  f"and write recipes/{recipe}/README.md's Results section")
            return
        if status not in (0, contract.EXIT_TARGET_MISSED):
            raise Exit(f"invoke results {recipe}: the run failed with status {status}", code=status)
    try:
        readme = kept.keep(recipe, from_, launcher)
    except kept.ResultsError as error:
        host.fail(str(error))
    print(f"kept {os.path.relpath(kept.kept_dir(recipe, launcher), host.ROOT)}/results.json, drew "
          f"docs/results/{recipe}/curve.png and wrote the Results section of {readme}")
