"""The names only the host side agrees on: where a job runs, on which image and software stack, what
starts Horovod's processes, and which module the preflight check runs. `invoke` (tasks/), the builders
here and the nightly (ci/) read them; nothing inside a training image does, so they are not part of
tf_recipes.contract, the agreement between a train.py and what starts it.

This module imports nothing, so any builder may import it and stay pure.
"""

HOROVOD_RUNNERS = ("horovodrun", "mpirun")  # what starts the Horovod processes
RUNTIMES = ("local", "docker", "apptainer")  # where the processes run
BASES = ("ngc", "gpu", "cpu")  # image variants: NVIDIA's TensorFlow image, images/current's gpu target, a CPU image

# -- the software stacks (each pinned by its pip constraints file, stacks/NAME.txt) --------------------
# ngc-25.02: the TensorFlow of NVIDIA's last NGC TensorFlow image (TF 2.17), the only one Horovod
# 0.28.1 builds against. current: the newest TensorFlow release, for today's Pythons. The stacks, the
# default one, the launchers each has and the stack of a TensorFlow version are tf_recipes.contract's
# (STACKS, DEFAULT_STACK, STACK_LAUNCHERS, stack_of_tensorflow): a train.py reads them too.
# The image bases of each stack, the GPU one first: ngc is nvcr.io/nvidia/tensorflow:25.02-tf2-py3,
# gpu images/current's gpu target (TensorFlow with the CUDA wheels it was built for), cpu images/cpu or
# images/current's cpu target.
STACK_BASES = {"ngc-25.02": ("ngc", "cpu"), "current": ("gpu", "cpu")}
STACK_FILE = "stacks/{stack}.txt"

# -- the preflight check (`invoke preflight`, `python -m tf_recipes.operations.preflight`) ----------------------------
PREFLIGHT_MODULE = "tf_recipes.operations.preflight"  # what the launchers start instead of a recipe's train.py
