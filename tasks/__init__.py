"""invoke tasks: build the recipe images and run the recipes, on this machine, in a container or on
a cluster; prove them (nightly) and measure them (bench). One module per topic:

    tasks/run.py       invoke run RECIPE                 train under a launcher, locally or in a container
    tasks/images.py    invoke build RECIPE, images.*     the recipe images and their base images
    tasks/clusters.py  invoke sbatch | k8s | launch-files  SLURM scripts, Kubernetes manifests, launch/ files
    tasks/proving.py   invoke nightly | bench | results  the nightly container CI, the benchmarks, README Results
    tasks/starting.py  invoke new NAME --from RECIPE     a recipe of your own, started from one of these
    tasks/preflight.py invoke preflight RECIPE           check a cluster in seconds: ranks, versions, all-reduce
    tasks/predicting.py invoke predict RECIPE --model EXPORT --input FILE|FOLDER --out DIR   use a trained model
    tasks/host.py      what the tasks ask of this machine (settings, docker, git, running a command)

    invoke run mnist-cnn --gpus 0 --cpu-replicas 2 --launcher multiworker -- --synthetic --max-steps 20
    invoke run cityscapes-unet --gpus 8
    invoke build mnist-cnn --base cpu
    invoke images.bootstrap && invoke images.cpu

Every command is built by a pure function in commands/ and printed before it runs; `--dry` prints
it and stops. Defaults live in the `tf_recipes` configuration (tasks/host.py's DEFAULTS) and can be
overridden in invoke.yaml or with INVOKE_TF_RECIPES_* environment variables, for every task.
"""
import os
import sys

# invoke puts tasks/ itself on sys.path; ci/ (the nightly and bench runners) sits beside it.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(1, _ROOT)

from invoke import Collection  # noqa: E402

from tasks import clusters, images, predicting, preflight, proving, starting  # noqa: E402
from tasks.host import DEFAULTS  # noqa: E402
from tasks.run import run  # noqa: E402

namespace = Collection(run, images.build, clusters.sbatch, proving.bench, proving.nightly, proving.results,
                       Collection("images", images.bootstrap, images.cpu, images.gpu))
namespace.add_task(clusters.k8s_manifests, name="k8s")
namespace.add_task(clusters.launch_files_task, name="launch-files")
namespace.add_task(starting.new)
namespace.add_task(preflight.preflight)
namespace.add_task(predicting.predict)
namespace.configure({"tf_recipes": DEFAULTS})
