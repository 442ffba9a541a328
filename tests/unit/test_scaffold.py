"""`invoke new`'s builders (commands/scaffold.py): names, renaming, the nightly entry; and the task's
refusals and dry run. The new recipe training for real is tests/integration/test_new_recipe.py."""
import pytest
import yaml

from ci.nightly import matrix as nightly
from commands import k8s, launch_files, scaffold
from commands.launch import LaunchError
from helpers import REPO, run_invoke

RECIPES = ["cassava-resnet", "cityscapes-unet", "mnist-cnn"]
MATRIX = (REPO / "ci" / "nightly" / "matrix.yaml").read_text()


@pytest.mark.parametrize("name", ["my-cnn", "a", "leaf-disease-2", "x" * scaffold.MAX_NAME])
def test_valid_names_pass(name):
    scaffold.check_name(name, RECIPES, "mnist-cnn")


@pytest.mark.parametrize("name", ["My-CNN", "my_cnn", "2cnn", "-cnn", "cnn-", "my--cnn", "my cnn", "../cnn",
                                  "my.cnn", "", "x" * (scaffold.MAX_NAME + 1)])
def test_a_name_that_is_not_a_folder_image_and_kubernetes_name_is_refused(name):
    with pytest.raises(LaunchError, match="is not valid: use lowercase letters"):
        scaffold.check_name(name, RECIPES, "mnist-cnn")


def test_an_existing_name_and_an_unknown_source_are_refused():
    with pytest.raises(LaunchError, match="recipes/cassava-resnet exists already"):
        scaffold.check_name("cassava-resnet", RECIPES, "mnist-cnn")
    with pytest.raises(LaunchError, match="--from 'resnet' is not a recipe; choose one of: cassava-resnet"):
        scaffold.check_name("my-cnn", RECIPES, "resnet")


def test_the_longest_name_renders_every_launch_file_and_valid_kubernetes_names():
    name = "x" * scaffold.MAX_NAME
    files = launch_files.launch_files(name)
    assert len(files) == len(launch_files.launch_files("mnist-cnn"))
    for kind in ("mpijob", "tfjob", "job"):
        for document in k8s.build_manifests(name, kind=kind, workers=2, gpus_per_worker=8, image="i",
                                            results="tf-recipes-results"):
            assert len(document["metadata"]["name"]) <= 63
    with pytest.raises(LaunchError):  # one character more is what the builders refuse
        k8s.build_manifests(name + "x", kind="tfjob", workers=2, gpus_per_worker=8, image="i",
                            results="tf-recipes-results")


def test_renaming_turns_every_mention_of_the_recipe_into_the_new_name():
    text = (REPO / "recipes" / "mnist-cnn" / "train.py").read_text()
    renamed = scaffold.rename(text, "mnist-cnn", "my-cnn")
    assert 'RECIPE = "my-cnn"' in renamed and 'name="my_cnn"' in renamed
    assert "mnist-cnn" not in renamed and "mnist_cnn" not in renamed
    dockerfile = scaffold.rename((REPO / "recipes" / "mnist-cnn" / "Dockerfile").read_text(), "mnist-cnn", "my-cnn")
    assert "ARG RECIPE=my-cnn" in dockerfile and "-t tf-recipes/my-cnn:latest" in dockerfile


def test_launch_files_and_caches_are_not_copied():
    assert scaffold.copied("train.py") and scaffold.copied("Dockerfile") and scaffold.copied("sub/module.py")
    assert not scaffold.copied("launch/slurm-horovod.sbatch")
    assert not scaffold.copied("__pycache__/train.cpython-311.pyc") and not scaffold.copied("sub/__pycache__/x.pyc")


@pytest.mark.parametrize("source", RECIPES)
def test_the_nightly_entry_is_the_sources_renamed(source):
    entry = yaml.safe_load(scaffold.matrix_entry(MATRIX, source, "new-one"))
    expected = yaml.safe_load(scaffold.rename(yaml.safe_dump({source: yaml.safe_load(MATRIX)["recipes"][source]}),
                                              source, "new-one"))
    assert entry == expected


@pytest.mark.parametrize("source", RECIPES)
def test_adding_to_the_matrix_keeps_it_valid_and_runs_the_new_recipe_where_the_source_runs(source, tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_text(scaffold.add_to_matrix(MATRIX, source, "new-one"))
    nightly.load_matrix(str(path))  # the nightly's own checks accept it
    loaded, original = yaml.safe_load(path.read_text()), yaml.safe_load(MATRIX)
    assert loaded["recipes"]["new-one"] == yaml.safe_load(scaffold.matrix_entry(MATRIX, source, "new-one"))["new-one"]
    for tier, cells in original["tiers"].items():
        assert ("new-one" in loaded["tiers"][tier]["recipes"]) == (source in cells["recipes"]), tier
    assert {k: v for k, v in loaded["recipes"].items() if k != "new-one"} == original["recipes"]
    assert path.read_text().startswith(MATRIX.split("recipes:")[0])  # the comments are kept
    with pytest.raises(LaunchError, match="has an entry for new-one already"):
        scaffold.add_to_matrix(path.read_text(), source, "new-one")


def test_next_steps_name_the_lines_to_add_when_not_added():
    entry = scaffold.matrix_entry(MATRIX, "mnist-cnn", "my-cnn")
    steps = "\n".join(scaffold.next_steps("my-cnn", "mnist-cnn", entry, added=False))
    assert "--add-to-nightly" in steps and "  my-cnn:" in steps and "global_batch: 64" in steps
    assert "--add-to-nightly" not in "\n".join(scaffold.next_steps("my-cnn", "mnist-cnn", entry, added=True))


@pytest.mark.parametrize("args, message", [
    (["new", "My_CNN"], "error: recipe name 'My_CNN' is not valid"),
    (["new", "mnist-cnn", "--from", "cassava-resnet"], "error: recipes/mnist-cnn exists already"),
    (["new", "my-cnn", "--from", "resnet"], "error: --from 'resnet' is not a recipe"),
])
def test_the_task_refuses_with_one_line(args, message):
    process = run_invoke(*args)
    assert process.returncode == 2
    assert process.stderr.strip().startswith(message) and len(process.stderr.strip().splitlines()) == 1
    assert not (REPO / "recipes" / args[1]).exists() or args[1] == "mnist-cnn"


def test_the_dry_run_lists_the_files_and_writes_nothing():
    process = run_invoke("new", "my-cnn", "--from", "mnist-cnn", "--add-to-nightly", "--dry")
    assert process.returncode == 0, process.stderr
    assert "would write recipes/my-cnn/train.py" in process.stdout
    assert "would write recipes/my-cnn/launch/k8s-mpijob.yaml" in process.stdout
    assert "would add my-cnn to ci/nightly/matrix.yaml" in process.stdout
    assert not (REPO / "recipes" / "my-cnn").exists()
    assert (REPO / "ci" / "nightly" / "matrix.yaml").read_text() == MATRIX
