#!/usr/bin/env bash
# Run the test suite on a fresh Debian 12 machine, setting up what it needs first.
#
# The suite's tests lie in three folders, run in this order (testpaths in pyproject.toml):
#   tests/unit         builders, planning, parsing, YAML/manifest/workflow checks, README dry runs:
#                      seconds each; no training, no Docker engine, no SLURM
#   tests/recipes      each recipe's data, input pipeline, model, damaged data, one-process training
#   tests/integration  launchers in several processes, Docker, Apptainer, SLURM, act, Kubernetes in
#                      Docker, stop and resume, several hosts, benchmarks, the quick start on fresh
#                      Debian 12 and 13 root file systems
# and in two tiers across them (docs/correctness.md says which claims each proves):
#   per-push  every test not marked `full`: each promise proven once, on its cheapest real path, in
#             at most 30 minutes on a cold 2-core machine (BUDGET below)
#   full      every test, the per-push ones included: each recipe under every launcher, the other
#             Debian, the precision runs, the nightly workflow under act, Kubernetes in Docker, the
#             longer stop cases, the benchmarks; every night (`invoke nightly --suite`)
#
#   bash ci/test.sh                 # the per-push tier, on the ngc-25.02 stack: .venv with Horovod
#                                   # (ci/setup.sh), a Docker engine (ci/docker-engine.sh), a
#                                   # two-node SLURM cluster (ci/slurm-cluster.sh) and an `apptainer`
#                                   # command (ci/apptainer.sh), all three need root; then the tests
#   bash ci/test.sh --full          # the full tier, on the same set-up; writes its report (report.json,
#                                   # summary.md) to build/ci/report, or to --report DIR
#   bash ci/test.sh --full --collect-only -q   # lists the tier's tests: .venv only, nothing else set up
#   bash ci/test.sh -k parity       # extra arguments go to pytest
#   bash ci/test.sh --fast          # tests/unit only: ci/setup.sh with Horovod, no Docker, no SLURM
#   bash ci/test.sh --fast -k k8s   # extra arguments go to pytest here too
#   bash ci/test.sh --stack current         # the current stack (newest TensorFlow) in .venv-current:
#                                           # the unit and recipes tiers and the launcher parity
#                                           # and precision tests (single, mirrored, multiworker);
#                                           # the nightly runs it
#   bash ci/test.sh --stack current --fast  # the unit tier alone on the current stack
#   bash ci/test.sh --gpu-images    # tests/nightly alone: the current stack's GPU image and a rebuild of
#                                   # the image it replaced, checked without a GPU, in Docker and
#                                   # Apptainer (root, like the whole suite; ~3.4 GB of wheels, so
#                                   # the nightly runs it, not every push)
#
# Two pytest workers (pytest-xdist), one per core; tests/conftest.py says in which order they take
# the test modules. The full run overlaps its set-up with work that does not need it: once .venv
# exists, the unit and recipes tiers run beside the rest of the set-up (the engine, Horovod's
# compile, the SLURM cluster, Apptainer), and the container tests' images build in the background
# (ci/prepare-images.sh, with the Horovod wheel compiled here) until the integration tests need
# them. A tier is green only on all it holds: when fewer tests reported than it collected, or any
# skipped, it fails (ci/suite_report.py). Every run ends with each test module's time, the slowest
# first (ci/durations.py), the tally, and one line of its time: wall clock, set-up, tests, the CPU
# time of what it waited for and the machine's speed (its reference loop), also appended to
# $GITHUB_STEP_SUMMARY when that is set, so that growth shows on every CI run and every night; then
# ci/reaper.py's line with the CPU time of everything the run started, daemons included.
set -euo pipefail
cd "$(dirname "$0")/.."

# The whole run goes under ci/reaper.py: the daemons it starts (dockerd, containerd, munged,
# slurmctld, slurmd) are stopped when it ends, and the last line counts the CPU time of everything it
# started, theirs included (the image builds and containers run under dockerd, the SLURM jobs under
# slurmd). An engine or cluster that was running before is not this run's, and is left running.
if [ -z "${TF_RECIPES_UNDER_REAPER:-}" ]; then
    export TF_RECIPES_UNDER_REAPER=1
    exec python3 ci/reaper.py bash ci/test.sh "$@"
fi

fast=0
gpu_images=0
full=0
report=build/ci/report
stack=ngc-25.02
while [ $# -gt 0 ]; do
    case "$1" in
        --fast) fast=1; shift ;;
        --full) full=1; shift ;;
        --report) [ $# -ge 2 ] || { echo "ci/test.sh: --report needs a folder" >&2; exit 2; }
                  report=$2; shift 2 ;;
        --gpu-images) gpu_images=1; shift ;;
        --stack) [ $# -ge 2 ] || { echo "ci/test.sh: --stack needs a name (ngc-25.02 or current)" >&2; exit 2; }
                 stack=$2; shift 2 ;;
        *) break ;;
    esac
done

# Strict: tests that would skip for a missing Horovod or Docker engine fail instead.
export TF_RECIPES_STRICT=1
parallel=(-n 2 --dist loadscope --no-loadscope-reorder)
BUDGET=1800  # seconds: the per-push tier, cold, on a 2-core machine (README.md, "Testing")
if [ "$full" = 1 ]; then
    tier=full marks=()
else
    tier=per-push marks=(-m "not full")
fi
# Only list the tests: the venv is all that needs.
for arg in "$@"; do
    case "$arg" in
        --collect-only|--co)
            bash ci/setup.sh --stack "$stack" >&2
            venv=.venv; [ "$stack" = ngc-25.02 ] || venv=.venv-$stack
            exec "$venv/bin/python" -m pytest "${marks[@]}" "$@" ;;
    esac
done
# The machine's busy and idle time so far, in clock ticks (/proc/stat: user nice system idle iowait ...).
machine_cpu() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
read -r busy0 idle0 < <(machine_cpu)
# True when the arguments only change pytest's output (CI's -v), so the suite may be split in two runs.
only_output_options() {
    local arg
    for arg in "$@"; do
        case "$arg" in -v|-vv|-q|-rA|--tb=short|--tb=long) ;; *) return 1 ;; esac
    done
}
started=$SECONDS
mkdir -p build/ci
# pytest's JUnit files and collected counts of this run only (ci/durations.py and ci/suite_report.py read them)
rm -f build/ci/*.xml build/ci/collected-*.txt
# The machine's speed, so that the times of runs on different machines compare: the seconds one core
# takes for a fixed Python loop (10^7 additions, ci/reference_loop.py), before anything else of the run
# starts. Machines of the same nominal size have differed by a factor of three.
reference=$(python3 ci/reference_loop.py)

if [ "$gpu_images" = 1 ]; then
    tier=gpu-images
    venv=.venv
    bash ci/setup.sh --stack ngc-25.02
    bash ci/docker-engine.sh >/dev/null
    bash ci/apptainer.sh
    paths=(tests/nightly)
    parallel=()
elif [ "$stack" != ngc-25.02 ]; then
    tier=stack-$stack marks=()  # the nightly's: what it runs of the suite on the other stack, all of it
    venv=.venv-$stack
    bash ci/setup.sh --stack "$stack" --venv "$venv"
    paths=(tests/unit)
    [ "$fast" = 1 ] || paths+=(tests/recipes tests/integration/test_mnist_launchers.py tests/integration/test_precision.py)
elif [ "$fast" = 1 ]; then
    tier=unit
    venv=.venv
    bash ci/setup.sh --stack ngc-25.02 --horovod
    paths=(tests/unit)
else
    venv=.venv
    paths=()
    bash ci/setup.sh --stack ngc-25.02  # .venv without Horovod: what the image builds need
    if only_output_options "$@"; then
        # The unit and recipes tiers need no Horovod, Docker engine or SLURM,
        # so they run now, beside the rest of the set-up, which often waits on downloads; the
        # integration tier runs once the set-up is done and they have ended.
        setsid "$venv/bin/python" -m pytest "${parallel[@]}" "${marks[@]}" \
            --junitxml=build/ci/unit-and-recipes.xml --collected-file=build/ci/collected-unit-and-recipes.txt \
            tests/recipes tests/unit "$@" >build/ci/unit-and-recipes.log 2>&1 &
        unit=$!
        echo "[test] running the unit and recipes tiers beside the set-up (log: build/ci/unit-and-recipes.log," \
             "shown when they end)" >&2
        paths=(tests/integration)
    fi
    # If this script is stopped (a cancelled CI run), the tests beside the set-up and the image builds stop with it.
    trap 'kill -- ${prepare:+-"$prepare"} ${unit:+-"$unit"} 2>/dev/null || true' EXIT
    bash ci/docker-engine.sh >/dev/null
    # Horovod before the images: the CPU base installs the wheel compiled here rather than compiling
    # Horovod a second time (ci/prepare-images.sh).
    bash ci/setup.sh --stack ngc-25.02 --horovod
    # Every `invoke images.cpu` of the run (ci/prepare-images.sh, the tests' fixture, the nightly smoke
    # tier under act) then builds the same image, so the builds after the first are all cache.
    if wheel=$(bash ci/setup.sh --stack ngc-25.02 --print-horovod-wheel 2>/dev/null); then
        export INVOKE_TF_RECIPES_HOROVOD_WHEEL=$wheel
    fi
    # Its own process group (setsid), so that whatever it still runs when the tests end can be stopped.
    setsid bash ci/prepare-images.sh >build/ci/prepare-images.log 2>&1 &
    prepare=$!
    echo "[test] building the test images in the background (log: build/ci/prepare-images.log)" >&2
    bash ci/slurm-cluster.sh
    bash ci/apptainer.sh
fi
setup=$((SECONDS - started))

status=0
if [ -n "${unit:-}" ]; then
    wait "$unit" || status=$?
    echo "[test] the unit and recipes tiers, run beside the set-up (exit $status; $((SECONDS - started)) s since" \
         "the start):" >&2
    cat build/ci/unit-and-recipes.log
fi
"$venv/bin/python" -m pytest "${parallel[@]}" "${marks[@]}" --junitxml=build/ci/tests.xml \
    --collected-file=build/ci/collected-tests.txt "${paths[@]}" "$@" || status=$?
if [ -n "${prepare:-}" ]; then
    kill -- -"$prepare" 2>/dev/null || true
    wait "$prepare" 2>/dev/null || true
fi

# Each test module's time, the slowest first: where the run's time went (ci/durations.py).
python3 ci/durations.py build/ci/*.xml >&2 || true

# Two CPU figures. What this script waited for, as /usr/bin/time counts it (`times`, run here, not in a
# subshell): not dockerd's children, so not what runs in a docker build or a container. And the whole
# machine's busy time from /proc/stat, which sees those too (and anything else the machine runs).
wall=$((SECONDS - started))
times >build/ci/times.txt
cpu=$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' \
      build/ci/times.txt)
read -r busy1 idle1 < <(machine_cpu)
cores() { awk -v c="$1" -v w="$2" 'BEGIN { printf "%.2f", (w > 0 ? c / w : 0) }'; }
# The tally against what was collected: green on nothing, or on less than the tier holds, is red. The full
# tier keeps its report (`invoke nightly --suite` puts it in docs/nightly/suite).
tallied=(--tier "$tier" --collected build/ci/collected-*.txt)
if [ "$tier" = full ]; then
    tallied+=(--report "$report" --command "bash ci/test.sh --full${*:+ $*}" --wall "$wall" --setup "$setup"
              --cpu "$cpu" --reference "$reference")
fi
python3 ci/suite_report.py "${tallied[@]}" --junit build/ci/*.xml || { [ "$status" != 0 ] || status=1; }
line="ci/test.sh ($tier tier) $*: $wall s (set-up $setup s, tests $((wall - setup)) s), exit $status;"
line+=" user+system of its processes $cpu s ($(cores "$cpu" "$wall") cores);"
line+=" the machine's $(nproc) cores $(cores "$(( (busy1 - busy0) * $(nproc) ))" "$(( busy1 - busy0 + idle1 - idle0 ))") busy;"
line+=" its reference loop $reference s"
if [ "$tier" = per-push ] && [ "$wall" -gt "$BUDGET" ]; then
    line+="; over the per-push tier's budget of $BUDGET s"
fi
echo "[test] $line" >&2
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    echo "$line" >>"$GITHUB_STEP_SUMMARY" || true
fi
exit "$status"
