"""Pure builders: plain values in; an argv list (and environment), script text or manifest dicts out.

`choices` (the host side's own names: runtimes, image bases, Horovod runners, the preflight's
module), `launch` (the processes of each launcher), `containers` (docker and apptainer), `slurm` (sbatch
scripts), `k8s` (MPIJob, TFJob and Indexed Job manifests), `launch_files` (every recipe's
launch/ folder) and `scaffold` (a new recipe folder made from another, for `invoke new`). Nothing
here starts a process, writes or reads a file, or reads the environment; their unit tests call
them with values alone. The tasks (tasks/) gather the values from the machine and
run what these build.
"""
