#!/usr/bin/env bash
# Set up this checkout for training and testing: a virtual environment (.venv) with one of the two
# stacks in stacks/, the tf-recipes library (`tf_recipes`, editable) with the extras `host` and `dev`
# (invoke for tasks/, the test tools), and (with --horovod) Horovod 0.28.1 built from source with
# Gloo and MPI against that stack's TensorFlow.
#
#   bash ci/setup.sh                      # the stack this Python can install: ngc-25.02 where it can
#                                         # (TF 2.17.1, Python 3.9-3.12), else current (Python 3.13)
#   bash ci/setup.sh --stack current      # the newest TensorFlow (no horovod launcher)
#   bash ci/setup.sh --stack current --venv .venv-current   # a second stack beside .venv
#   bash ci/setup.sh --horovod            # also the horovod launcher (ngc-25.02 only; needs cmake, g++
#                                         # and OpenMPI; ~4 min the first time)
#   bash ci/setup.sh --print-stack        # which stack it would pick; nothing else
#   bash ci/setup.sh --print-compiler     # which C/C++ compilers Horovod would be built with; nothing else
#   bash ci/setup.sh --print-horovod-wheel   # the Horovod wheel --horovod built for this stack and
#                                         # TensorFlow wheel (for invoke images.cpu --horovod-wheel)
#   bash ci/setup.sh --tensorflow gpu     # the CUDA build of TensorFlow even without an NVIDIA GPU here
#
# Which TensorFlow wheel: on a machine with an NVIDIA GPU (/proc/driver/nvidia/gpus/ lists one, or
# `nvidia-smi -L` does), `tensorflow`, TensorFlow's CUDA build; without one, `tensorflow-cpu` of the
# same version, TensorFlow's own build without CUDA, which imports the same `tensorflow` module
# (and Horovod compiles against it) but prints none of the CUDA start-up errors (failed cuInit,
# cuDNN/cuFFT/cuBLAS factories, TensorRT) the CUDA build prints on a machine without a GPU. They are
# the pyproject.toml extras `gpu` and `cpu`; `--tensorflow gpu|cpu` overrides the choice. A venv
# holding the other wheel has it uninstalled first (both install the same files).
#
# A stack is a pip constraints file, stacks/NAME.txt, whose `# python-min:` and `# python-max:`
# lines say which interpreters it installs on. The venv records its stack in VENV/tf-recipes-stack,
# and a venv of the other stack is refused rather than rebuilt.
#
# Horovod 0.28.1 is compiled with GCC 12 (CC=gcc-12 CXX=g++-12) wherever gcc-12 and g++-12 are on PATH,
# else with the default compiler. GCC 12 is Debian 12's, which it is built with here; GitHub's
# ubuntu-24.04 has GCC 12, 13 and 14 with 13 the default, and 0.28.1 predates Horovod's fix of the
# headers GCC 13 no longer includes for it.
#
# Horovod gets two controllers: Gloo (`horovodrun --gloo`) and MPI (`mpirun`, and `srun --mpi=pmix` under
# SLURM). MPI is Debian's OpenMPI: as root, ci/setup.sh apt-installs libopenmpi-dev and openmpi-bin when
# mpicxx or mpirun is missing; otherwise it names them and stops.
#
# Idempotent: a second run installs nothing new and leaves the venv untouched (VENV/tf-recipes-installed
# holds the checksum of pyproject.toml and the stack's constraints it installed; while they are the same
# and the venv imports tf-recipes, pip is not run, so tests running from the venv meanwhile are safe).
# The Horovod wheel it built is kept in pip's cache folder (`pip cache dir`, so PIP_CACHE_DIR moves
# it), under tf-recipes-wheels/horovod-0.28.1-WHEELTF-pyPY-gloo-mpi-release/; a fresh .venv on the same
# machine installs that wheel instead of compiling Horovod again. The folder names what the wheel was
# built with (WHEEL is tensorflow or tensorflow-cpu; release: optimised, without debug information), so
# a wheel built without MPI, against the other TensorFlow wheel, or with -g, is never reused.
set -euo pipefail
cd "$(dirname "$0")/.."

STACKS="ngc-25.02 current"  # in order of preference
stack=auto
venv=.venv
with_horovod=0
print_compiler=0
print_stack=0
print_horovod_wheel=0
tensorflow_build=auto
while [ $# -gt 0 ]; do
    case "$1" in
        --horovod) with_horovod=1 ;;
        --print-compiler) print_compiler=1 ;;
        --print-stack) print_stack=1 ;;
        --print-horovod-wheel) print_horovod_wheel=1 ;;
        --stack|--venv|--tensorflow)
            [ $# -ge 2 ] || { echo "ci/setup.sh: $1 needs a value" >&2; exit 2; }
            case "$1" in --stack) stack=$2 ;; --venv) venv=$2 ;; *) tensorflow_build=$2 ;; esac
            shift ;;
        --stack=*) stack=${1#--stack=} ;;
        --venv=*) venv=${1#--venv=} ;;
        --tensorflow=*) tensorflow_build=${1#--tensorflow=} ;;
        *) echo "ci/setup.sh: unknown option $1 (known: --stack NAME, --venv DIR, --tensorflow gpu|cpu, --horovod, --print-stack, --print-compiler, --print-horovod-wheel)" >&2
           exit 2 ;;
    esac
    shift
done

# Quiet with --print-horovod-wheel: its answer, or one error line, is all it prints.
log() { [ "$print_horovod_wheel" = 1 ] || printf '[setup] %s\n' "$*" >&2; }
die() { printf 'ci/setup.sh: error: %s\n' "$*" >&2; exit 2; }

# "CC CXX" for Horovod's build: gcc-12 g++-12 when both are on PATH, else nothing (the default).
horovod_compilers() {
    if command -v gcc-12 >/dev/null 2>&1 && command -v g++-12 >/dev/null 2>&1; then
        echo "gcc-12 g++-12"
    fi
}

if [ "$print_compiler" = 1 ]; then
    choice="$(horovod_compilers)"
    echo "${choice:-default}"
    exit 0
fi

# stack_python NAME KEY: the `# KEY: X.Y` line of stacks/NAME.txt.
stack_python() { sed -n "s/^# $2: *\([0-9.]*\) *$/\1/p" "stacks/$1.txt"; }

# at_least A B: version A (like 3.12) is B or later.
at_least() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" = "$2" ]; }

# python_fits NAME: this python3 is within the stack's python-min and python-max.
python_fits() { at_least "$python_version" "$(stack_python "$1" python-min)" && at_least "$(stack_python "$1" python-max)" "$python_version"; }

# python_range NAME: "3.10-3.12"
python_range() { echo "$(stack_python "$1" python-min)-$(stack_python "$1" python-max)"; }

command -v python3 >/dev/null 2>&1 || die "no python3 on PATH; install Python 3.10 to 3.13 (apt-get install python3 python3-venv)"
python_version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ranges=""
for name in $STACKS; do ranges="$ranges${ranges:+, }$name Python $(python_range "$name")"; done
if [ "$stack" = auto ]; then
    stack=""
    for name in $STACKS; do
        if python_fits "$name"; then stack=$name; break; fi
    done
    [ -n "$stack" ] || die "no stack installs on Python $python_version ($ranges); install one of those Pythons"
    why="the first of ($STACKS) that Python $python_version installs"
else
    if [ ! -f "stacks/$stack.txt" ] || [[ " $STACKS " != *" $stack "* ]]; then
        die "unknown stack '$stack'; choose one of: ${STACKS// /, }"
    fi
    python_fits "$stack" || die "stack $stack needs Python $(python_range "$stack"), and python3 is $python_version; choose another stack ($ranges)"
    why="asked for with --stack"
fi
if [ "$print_stack" = 1 ]; then
    echo "$stack"
    exit 0
fi
tensorflow=$(sed -n 's/^tensorflow==//p' "stacks/$stack.txt")
log "stack $stack (TensorFlow $tensorflow; $why) in $venv"
case "$tensorflow_build" in
    auto)
        if compgen -G '/proc/driver/nvidia/gpus/*' >/dev/null || nvidia-smi -L >/dev/null 2>&1; then
            tensorflow_build=gpu; why="an NVIDIA GPU is here"
        else
            tensorflow_build=cpu; why="no NVIDIA GPU here"
        fi ;;
    gpu|cpu) why="asked for with --tensorflow" ;;
    *) die "unknown --tensorflow '$tensorflow_build'; choose gpu (the CUDA build, tensorflow) or cpu (tensorflow-cpu)" ;;
esac
if [ "$tensorflow_build" = gpu ]; then tf_wheel=tensorflow tf_other=tensorflow-cpu; else tf_wheel=tensorflow-cpu tf_other=tensorflow; fi
log "TensorFlow wheel $tf_wheel ($why)"
# horovod_wheels: the folder the Horovod wheel is kept in (see the header); nothing when pip's cache is off.
horovod_wheels() {
    local cache
    if cache=$("$venv/bin/python" -m pip cache dir 2>/dev/null) && [ -n "$cache" ]; then
        echo "$cache/tf-recipes-wheels/horovod-0.28.1-$tf_wheel$tensorflow-py$python_version-gloo-mpi-release"
    fi
}
if [ "$print_horovod_wheel" = 1 ]; then
    grep -q '^horovod==' "stacks/$stack.txt" || die "stack $stack has no horovod launcher, so no Horovod wheel; use --stack ngc-25.02"
    folder=$(horovod_wheels)
    wheel=$(find "${folder:-/nonexistent}" -maxdepth 1 -name 'horovod-0.28.1-*.whl' 2>/dev/null | head -n 1 || true)
    [ -n "$wheel" ] || die "no Horovod wheel was built here for stack $stack, $tf_wheel and Python $python_version; run bash ci/setup.sh --stack $stack --horovod"
    echo "$wheel"
    exit 0
fi
if [ "$with_horovod" = 1 ] && ! grep -q '^horovod==' "stacks/$stack.txt"; then
    die "--horovod: Horovod 0.28.1 does not build against TensorFlow $tensorflow, so stack $stack has no horovod launcher; use --stack ngc-25.02 (Python $(python_range ngc-25.02))"
fi

marker="$venv/tf-recipes-stack"
if [ -f "$marker" ] && [ "$(cat "$marker")" != "$stack" ]; then
    die "$venv holds stack $(cat "$marker"), not $stack; give another folder with --venv DIR, or remove $venv yourself"
fi
if [ ! -x "$venv/bin/python" ]; then
    if [ -e "$venv" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
        die "$venv exists and is not a virtual environment; give another folder with --venv DIR"
    fi
    python3 -c 'import ensurepip' 2>/dev/null || die "Python $python_version has no venv module with pip; install python3-venv (apt-get install python3-venv)"
    log "creating $venv with Python $python_version"
    python3 -m venv "$venv"
fi
echo "$stack" > "$marker"
installed="$venv/tf-recipes-installed"
wanted=$( (cat pyproject.toml "stacks/$stack.txt"; echo "$tf_wheel") | sha256sum | cut -d ' ' -f 1)
# -I: the import must come from the venv's install, not from this folder.
if [ -f "$installed" ] && [ "$(cat "$installed")" = "$wanted" ] &&
   (python="$(cd "$venv" && pwd)/bin/python" && cd / && "$python" -I -c 'import tf_recipes, invoke, pytest') \
       2>/dev/null; then
    log "tf-recipes and its dependencies are installed in $venv as pyproject.toml and stacks/$stack.txt ask"
else
    log "installing tf-recipes and its dependencies into $venv"
    rm -f "$installed"
    if "$venv/bin/python" -m pip show --quiet "$tf_other" >/dev/null 2>&1; then
        log "uninstalling $tf_other from $venv: $tf_wheel replaces it"
        "$venv/bin/python" -m pip uninstall --quiet --disable-pip-version-check -y "$tf_other"
        # Horovod was compiled against the other wheel.
        "$venv/bin/python" -m pip uninstall --quiet --disable-pip-version-check -y horovod >/dev/null 2>&1 || true
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "stacks/$stack.txt" -e ".[dev,$tensorflow_build]"
    echo "$wanted" >"$installed"
fi

if [ "$with_horovod" = 1 ]; then
    # Exit status 0 when the venv's Horovod has both controllers, 1 when it lacks one, other when none imports.
    horovod_controllers='import sys, horovod.tensorflow as h; sys.exit(0 if h.gloo_built() and h.mpi_built() else 1)'
    if "$venv/bin/python" -c "$horovod_controllers" 2>/dev/null; then
        log "horovod already installed with Gloo and MPI: $("$venv/bin/python" -c 'import horovod; print(horovod.__version__)')"
    else
        # MPI: the headers and mpicxx to build against (libopenmpi-dev), mpirun to run (openmpi-bin).
        mpi_packages=()
        command -v mpicxx >/dev/null || mpi_packages+=(libopenmpi-dev)
        command -v mpirun >/dev/null || mpi_packages+=(openmpi-bin)
        if ((${#mpi_packages[@]})); then
            [ "$(id -u)" = 0 ] || { log "ERROR: Horovod's MPI controller needs OpenMPI (apt-get install ${mpi_packages[*]})"; exit 1; }
            log "installing ${mpi_packages[*]} (Horovod's MPI controller)"
            export DEBIAN_FRONTEND=noninteractive
            { apt-get install -y -qq --no-install-recommends "${mpi_packages[@]}" >/dev/null 2>&1 ||
              { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${mpi_packages[@]}" >/dev/null; }; } ||
                { log "ERROR: apt-get could not install ${mpi_packages[*]}"; exit 1; }
        fi
        # The wheel's folder names what it was built with (see the header); with pip's cache disabled
        # (PIP_NO_CACHE_DIR) it is built into a temporary folder and not kept.
        wheels=$(horovod_wheels)
        if [ -z "$wheels" ]; then
            wheels=$(mktemp -d)
            trap 'rm -rf "$wheels"' EXIT
        fi
        built_wheel() { find "$wheels" -maxdepth 1 -name 'horovod-0.28.1-*.whl' 2>/dev/null | head -n 1 || true; }
        wheel=$(built_wheel)
        if [ -n "$wheel" ]; then
            log "installing the Horovod wheel built before: $wheel"
        else
            for tool in cmake g++; do
                command -v "$tool" >/dev/null || { log "ERROR: building Horovod needs $tool (apt-get install $tool)"; exit 1; }
            done
            log "building horovod 0.28.1 against TensorFlow $tensorflow with Gloo and MPI ($(mpirun --version 2>/dev/null | head -n 1))"
            read -r cc cxx <<<"$(horovod_compilers)" || true
            if [ -n "${cc:-}" ]; then
                export CC="$cc" CXX="$cxx"
                log "compiling Horovod with $CC and $CXX ($("$CXX" -dumpfullversion))"
            else
                log "compiling Horovod with the default compiler, no gcc-12/g++-12 on PATH ($(g++ -dumpfullversion 2>/dev/null || echo '?'))"
            fi
            mkdir -p "$wheels"
            # HOROVOD_CMAKE: tools/horovod_cmake.sh, cmake without -g (optimised as before, no debug information).
            # --no-build-isolation: Horovod must compile against the TensorFlow installed here.
            # --no-cache-dir: pip's own wheel cache is keyed by the source alone, and could hand back a
            # wheel built with other HOROVOD_* choices.
            HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
            HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CMAKE="$PWD/tools/horovod_cmake.sh" \
                "$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation \
                    --no-cache-dir --no-deps -c "stacks/$stack.txt" -w "$wheels" "horovod==0.28.1"
            wheel=$(built_wheel)
            [ -n "$wheel" ] || { log "ERROR: pip built no horovod wheel in $wheels"; exit 1; }
        fi
        # The same version may be installed without MPI: replace it.
        "$venv/bin/python" -m pip uninstall --quiet --disable-pip-version-check -y horovod >/dev/null 2>&1 || true
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "stacks/$stack.txt" "$wheel"
        "$venv/bin/python" -c "$horovod_controllers" 2>/dev/null ||
            { log "ERROR: the Horovod installed from $wheel lacks Gloo or MPI; remove $wheels and run again"; exit 1; }
    fi
    "$venv/bin/horovodrun" --check-build
fi
log "ready: $venv/bin/invoke --list"
