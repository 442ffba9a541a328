"""`invoke sbatch`, `invoke k8s` and `invoke launch-files`: a recipe as a SLURM script, as
Kubernetes manifests, and as the files of every recipe's launch/ folder."""
from __future__ import annotations

import os
import shlex
import shutil

from invoke import Exit, task

from commands import k8s, launch, launch_files, slurm
from tasks import host


@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/",
        "launcher": "multiworker | horovod (any node count) | mirrored | single (one node)",
        "nodes": "nodes to allocate",
        "gpus-per-node": "GPUs per node; one task per GPU for multiworker and horovod",
        "tasks-per-node": "with --gpus-per-node 0: worker processes per node",
        "cpus-per-task": "CPU cores per task",
        "sif": "run every task in this Apptainer image (see `invoke build RECIPE --runtime apptainer`)",
        "container-image": "run every task in this image through Pyxis/Enroot (srun --container-image)",
        "data-dir": "dataset folder on the cluster's shared file system",
        "time": "wall-clock limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
        "partition": "SLURM partition", "account": "SLURM account",
        "job-name": "job name (default tf-recipes-RECIPE)",
        "signal-grace": "seconds before the time limit at which the tasks get SIGUSR1 and checkpoint",
        "requeue": "when the job stops on a signal with a checkpoint, requeue it; it resumes by itself",
        "preflight": "first run `python -m tf_recipes.operations.preflight` in every task (invoke preflight); a broken "
                     "cluster stops the job",
        "mpi": "srun's MPI plugin for the horovod ranks: pmix (default), or pmi2 on a cluster without PMIx",
        "out": "write the script here instead of printing it",
        "dry": "print the script even when --out is given; write nothing",
    },
)
def sbatch(c, recipe, launcher="horovod", nodes="1", gpus_per_node="8", tasks_per_node="1", cpus_per_task="8",
           sif=None, container_image=None, data_dir=None, time="01:00:00", partition=None, account=None,
           job_name=None, signal_grace=str(slurm.DEFAULT_SIGNAL_GRACE), requeue=False, preflight=False,
           mpi=slurm.DEFAULT_MPI, out=None, dry=False):
    """Render an sbatch script that runs RECIPE on a SLURM cluster; arguments after -- go to train.py."""
    try:
        host.check_recipe(recipe, "sbatch")
        text = slurm.render_sbatch(
            recipe, launcher, nodes=launch.parse_count("--nodes", nodes),
            gpus_per_node=launch.parse_count("--gpus-per-node", gpus_per_node),
            train_args=shlex.split(c.remainder or ""), sif=sif, container_image=container_image,
            data_dir=data_dir, time=time, partition=partition, account=account, job_name=job_name,
            tasks_per_node=launch.parse_count("--tasks-per-node", tasks_per_node, minimum=1),
            cpus_per_task=launch.parse_count("--cpus-per-task", cpus_per_task, minimum=1),
            signal_grace=launch.parse_count("--signal-grace", signal_grace), requeue=requeue, preflight=preflight,
            mpi=mpi)
    except launch.LaunchError as error:
        host.fail(str(error))
    host.write_or_print(text, out, dry, f"submit with: sbatch {out}")


@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/",
        "launcher": "horovod (default) | multiworker",
        "kind": "job (Indexed Job, no operator; recommended for multiworker) | mpijob (MPI Operator; horovod) | "
                "tfjob (Training Operator v1, no longer maintained)",
        "workers": "pods (MPI workers, TF workers)",
        "gpus-per-worker": "GPUs of each pod; 0 runs on CPUs",
        "image": "image the pods run (default tf-recipes/RECIPE:ngc; push it to a registry the cluster reaches)",
        "data": "dataset volume: a PersistentVolumeClaim name or an absolute host path (mounted read-only at /data; "
                "a host path keeps the pods out of every Pod Security profile)",
        "results": "results volume, shared by all pods: a PersistentVolumeClaim name or an absolute host path",
        "run-as-user": f"with job and tfjob: UID, GID and fsGroup of the pods (default {k8s.RUN_AS_USER}; "
                       "the MPIJob's pods run as root)",
        "cpus-per-worker": f"CPUs each worker pod requests, and its limit (default {k8s.CPUS_PER_GPU} per GPU)",
        "memory-per-worker": f"memory each worker pod requests, and its limit, as 256Gi or 512Mi "
                             f"(default {k8s.MEMORY_PER_GPU_GI}Gi per GPU)",
        "shm-size": f"size limit of /dev/shm, counted in the memory (default {k8s.SHM_PER_GPU_GI}Gi per GPU)",
        "namespace": "namespace of every object (default: kubectl's current one)",
        "name": "job name (default RECIPE-LAUNCHER); results go to /results/NAME",
        "horovod-runner": "with mpijob: mpirun (default) | horovodrun",
        "grace-period": "seconds between SIGTERM and SIGKILL: time to stop at a step and checkpoint",
        "preflight": "first run `python -m tf_recipes.operations.preflight` in the containers that start train.py "
                     "(invoke preflight)",
        "out": "write the manifests here instead of printing them",
        "dry": "print the manifests even when --out is given; write nothing",
    },
)
def k8s_manifests(c, recipe, launcher=None, kind=None, workers="2", gpus_per_worker="8", image=None, data=None,
                  results="tf-recipes-results", namespace=None, name=None, horovod_runner="mpirun",
                  grace_period=str(k8s.GRACE_PERIOD), run_as_user=None, cpus_per_worker=None, memory_per_worker=None,
                  shm_size=None, preflight=False, out=None, dry=False):
    """Render Kubernetes manifests that run RECIPE; arguments after -- go to train.py."""
    try:
        host.check_recipe(recipe, "k8s")
        documents = k8s.build_manifests(
            recipe, launcher=launcher, kind=kind, workers=launch.parse_count("--workers", workers),
            gpus_per_worker=launch.parse_count("--gpus-per-worker", gpus_per_worker),
            image=image or host.image_tag(c, recipe, "ngc"), data=data, results=results, namespace=namespace,
            name=name, train_args=shlex.split(c.remainder or ""), horovod_runner=horovod_runner,
            grace_period=launch.parse_count("--grace-period", grace_period),
            run_as_user=None if run_as_user is None else launch.parse_count("--run-as-user", run_as_user),
            cpus_per_worker=(None if cpus_per_worker is None
                             else launch.parse_count("--cpus-per-worker", cpus_per_worker)),
            memory_per_worker=memory_per_worker, shm_size=shm_size, preflight=preflight)
    except launch.LaunchError as error:
        host.fail(str(error))
    host.write_or_print(k8s.render_yaml(documents), out, dry, f"apply with: kubectl apply -f {out}")


def launch_folder(recipe: str) -> str:
    return os.path.join(host.ROOT, "recipes", recipe, launch_files.FOLDER)


def files_in(folder: str) -> dict[str, str]:
    """{file name: text} of a folder's files ({} when there is no folder)."""
    if not os.path.isdir(folder):
        return {}
    present = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as handle:
            present[name] = handle.read()
    return present


def stale_launch_files(recipes) -> list[str]:
    """Paths, relative to the repository, of launch files that are not what the builders render."""
    return [os.path.relpath(os.path.join(launch_folder(recipe), name), host.ROOT)
            for recipe in recipes for name in launch_files.stale_files(recipe, files_in(launch_folder(recipe)))]


@task(
    help={"recipe": "only this recipe (default: every recipe)",
          "check": "write nothing; list the files that are stale and fail if any is",
          "dry": "list the files that would be written, write nothing"},
)
def launch_files_task(c, recipe=None, check=False, dry=False):
    """Write every recipe's launch/ folder: SLURM scripts, Kubernetes manifests, the docker command."""
    recipes = host.recipes()
    if recipe:
        try:
            host.check_recipe(recipe, "launch-files")
        except launch.LaunchError as error:
            host.fail(str(error))
        recipes = [recipe]
    if check:
        stale = stale_launch_files(recipes)
        for path in stale:
            print(f"stale: {path}")
        if stale:
            raise Exit("launch files are out of date; run `invoke launch-files`", code=1)
        print(f"launch files of {', '.join(recipes)} are up to date")
        return
    for name in recipes:
        folder = launch_folder(name)
        if not dry:
            shutil.rmtree(folder, ignore_errors=True)
            host.make_folder("the launch folder", folder)
        for filename, text in launch_files.launch_files(name).items():
            path = os.path.join(folder, filename)
            print(f"{'would write' if dry else 'wrote'} {os.path.relpath(path, host.ROOT)}")
            if not dry:
                with open(path, "w") as handle:
                    handle.write(text)
                if filename.endswith((".sh", ".sbatch")):
                    os.chmod(path, 0o755)
