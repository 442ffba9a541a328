"""`invoke new`'s builders (commands/scaffold.py): names, renaming, the nightly entry; and the task's
refusals, dry run and real runs in a copy of the repository (a recipe copied from a copy, binary
files, data and results folders, a source without a nightly entry). The new recipe training for
real is tests/integration/test_new_recipe.py."""
import ast
import re
import shutil
import subprocess
import sys

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


def test_data_results_and_checkpoints_are_not_copied():
    for path in ("data/train/0/a.png", "results/20260101-single/results.json", "checkpoints/ckpt-1.index",
                 "sub/checkpoints/ckpt-1.index", ".ipynb_checkpoints/train-checkpoint.py"):
        assert not scaffold.copied(path), path
    # A package of the recipe's own that happens to be called data is source.
    assert scaffold.copied("model/data/__init__.py") and scaffold.copied("data.py") and scaffold.copied("results.py")


@pytest.mark.parametrize("source", RECIPES)
def test_the_nightly_entry_is_the_sources_renamed(source):
    entry = yaml.safe_load(scaffold.matrix_entry(MATRIX, source, "new-one"))
    spec = yaml.safe_dump(yaml.safe_load(MATRIX)["recipes"][source])
    assert entry == {"new-one": yaml.safe_load(scaffold.rename(spec, source, "new-one"))}
    assert f"recipes/{source}/" not in str(entry)  # its data commands run the new recipe's own scripts


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


def source_files(recipe) -> dict[str, bytes]:
    folder = REPO / "recipes" / recipe
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file() and scaffold.copied(str(path.relative_to(folder))) and path.name != "README.md"}


def copy_recipe(files: dict[str, bytes], source: str, name: str) -> dict[str, bytes]:
    return {path: scaffold.rename_file(path, content, source, name) for path, content in files.items()}


@pytest.mark.parametrize("source", RECIPES)
@pytest.mark.parametrize("name", ["n", "x", "net", "data", "my-cnn"])
def test_a_copy_names_the_new_recipe_where_the_source_named_itself_and_still_parses(source, name):
    files = copy_recipe(source_files(source), source, name)
    for path, content in files.items():
        text = content.decode()
        if path.endswith(".py"):
            ast.parse(text, path)
        assert not re.search(rf"(?<![A-Za-z0-9_-]){source}(?![A-Za-z0-9_-])", text), path
    assert f'RECIPE = "{name}"' in files["train.py"].decode()
    dockerfile = files["Dockerfile"].decode()
    assert f"ARG RECIPE={name}\n" in dockerfile and f"-t tf-recipes/{name}:latest" in dockerfile
    assert dockerfile.startswith(f"# {name} recipe image:")


def code_names(content: bytes) -> list[str]:
    """The names a Python file's code uses, in order."""
    return [node.id if isinstance(node, ast.Name) else node.attr for node in ast.walk(ast.parse(content.decode()))
            if isinstance(node, (ast.Name, ast.Attribute))]


@pytest.mark.parametrize("source", RECIPES)
def test_a_copy_of_a_copy_with_a_one_letter_name_parses_and_keeps_every_other_n(source):
    """`invoke new n --from SOURCE`, then `invoke new x --from n`: the letter n of the code stays."""
    original = source_files(source)
    first = copy_recipe(original, source, "n")
    second = copy_recipe(first, "n", "x")
    for path, content in second.items():
        if path.endswith(".py"):
            ast.parse(content.decode(), path)
            assert code_names(content) == code_names(original[path]), path  # code is never renamed
    assert 'RECIPE = "x"' in second["train.py"].decode() and "ARG RECIPE=x\n" in second["Dockerfile"].decode()
    if source == "mnist-cnn":  # it names itself only in places that a one-letter name keeps
        assert second == copy_recipe(original, source, "x")


def test_a_name_that_is_part_of_other_words_is_renamed_only_as_the_recipe():
    source = """\"\"\"net: predict with an exported model.

    python recipes/net/train.py --launcher single, or `invoke run net --gpus 0`
\"\"\"
import network  # a network for net
RECIPE = "net"
net = network.resnet(name="net", subnet="net/a", label="net")
print(f"{net}\\n", results={"net": net_work}, path="results/net/x")  # a resnet
"""
    renamed = scaffold.rename_python(source, "net", "my-net")
    assert renamed == """\"\"\"my-net: predict with an exported model.

    python recipes/my-net/train.py --launcher single, or `invoke run my-net --gpus 0`
\"\"\"
import network  # a network for net
RECIPE = "my-net"
net = network.resnet(name="my_net", subnet="net/a", label="net")
print(f"{net}\\n", results={"net": net_work}, path="results/my-net/x")  # a resnet
"""
    ast.parse(renamed)
    # A hyphenated name is no word: a string that is it, or begins with it, names the recipe.
    assert scaffold.rename('x("my-net", "my-net input", "my-net-2", "my-nets")', "my-net", "n") == \
        'x("n", "n input", "my-net-2", "my-nets")'


def test_binary_files_are_copied_byte_for_byte():
    png = b"\x89PNG\r\n\x1a\n\x00\x00recipes/mnist-cnn/\xff\xfe mnist-cnn"
    assert scaffold.rename_file("assets/logo.png", png, "mnist-cnn", "x") == png
    latin1 = "# café recipes/mnist-cnn/\n".encode("latin-1")
    assert scaffold.rename_file("notes.txt", latin1, "mnist-cnn", "x") == latin1
    assert scaffold.rename_file("notes.txt", b"see recipes/mnist-cnn/\r\n", "mnist-cnn", "x") == b"see recipes/x/\r\n"


def test_a_copy_of_a_copy_adds_its_entry_and_leaves_every_other_line_as_it_was():
    with_n = scaffold.add_to_matrix(MATRIX, "mnist-cnn", "n")
    with_x = scaffold.add_to_matrix(with_n, "n", "x")
    entry = scaffold.matrix_entry(with_n, "n", "x")
    assert entry.startswith("  x:\n") and "--no-dropout" in entry and "reference: single" in entry
    assert with_x.replace(entry, "", 1).replace(", x]", "]") == with_n  # only inserted
    loaded = yaml.safe_load(with_x)
    assert loaded["recipes"]["x"] == loaded["recipes"]["n"] == yaml.safe_load(MATRIX)["recipes"]["mnist-cnn"]
    assert loaded["tiers"]["smoke"]["recipes"] == ["mnist-cnn", "n", "x"]


def test_a_tier_list_in_block_style_gets_the_new_name_as_a_line_of_its_own():
    block = MATRIX.replace("    recipes: [mnist-cnn]\n", "    recipes:\n      - mnist-cnn\n", 1)
    added = scaffold.add_to_matrix(block, "mnist-cnn", "my-cnn")
    assert "    recipes:\n      - mnist-cnn\n      - my-cnn\n" in added
    assert yaml.safe_load(added)["tiers"]["smoke"]["recipes"] == ["mnist-cnn", "my-cnn"]


def test_an_entry_that_cannot_be_copied_by_inserting_lines_is_refused():
    anchored = MATRIX.replace("  mnist-cnn:\n    global_batch: 64\n", "  mnist-cnn: &mnist\n    global_batch: 64\n", 1)
    with pytest.raises(LaunchError, match="would change more than its own lines; leave out --add-to-nightly"):
        scaffold.add_to_matrix(anchored, "mnist-cnn", "my-cnn")
    with pytest.raises(LaunchError, match="is not valid YAML"):
        scaffold.add_to_matrix("recipes: [", "mnist-cnn", "my-cnn")


def test_a_source_without_a_nightly_entry_gets_none_and_the_steps_say_what_to_add():
    without = MATRIX.replace("recipes: [mnist-cnn]", "recipes: [cassava-resnet]", 1)
    without = re.sub(r"  mnist-cnn:\n(    .*\n)+", "", without, count=1).replace("mnist-cnn, ", "")
    assert "mnist-cnn" not in yaml.safe_load(without)["recipes"]
    assert scaffold.matrix_entry(without, "mnist-cnn", "my-cnn") is None
    with pytest.raises(LaunchError, match="has no entry for mnist-cnn to copy: leave out --add-to-nightly and add an "
                                          "entry for my-cnn under `recipes:`"):
        scaffold.add_to_matrix(without, "mnist-cnn", "my-cnn")
    steps = "\n".join(scaffold.next_steps("my-cnn", "mnist-cnn", None, added=False))
    assert "mnist-cnn has no entry there to copy" in steps and "global_batch" in steps


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


def test_the_labels_are_read_train_py_first_then_by_name_and_listed_under_their_file():
    files = {"data.py": b"x = 1  # Distributed: c\n", "notes.txt": b"# Distributed: not python\n",
             "train.py": b"a = 1  # Distributed: a\n# Horovod: b\nb = 2  # a note\n"}
    labels = scaffold.distributed_labels(files)
    assert labels == [("train.py", "Distributed: a"), ("train.py", "Horovod: b"), ("data.py", "Distributed: c")]
    assert scaffold.labels_list(labels) == ("- [`train.py`](train.py)\n  - Distributed: a\n  - Horovod: b\n"
                                            "- [`data.py`](data.py)\n  - Distributed: c\n")


@pytest.mark.parametrize("source", RECIPES)
def test_the_new_readme_lists_the_distributed_labels_of_the_copied_folder(source):
    files = {path.name: path.read_bytes() for path in (REPO / "recipes" / source).iterdir() if path.is_file()}
    copied = {path: scaffold.rename_file(path, content, source, "my-copy") for path, content in files.items()
              if path.endswith(".py")}
    labels = scaffold.distributed_labels(copied)
    assert labels and labels[0][0] == "train.py"
    section = scaffold.readme("my-copy", source, "", labels).split("## What makes it distributed\n")[1]
    assert scaffold.labels_list(labels) in section.split("\n## ")[0]


def test_the_dry_run_lists_the_files_and_writes_nothing():
    process = run_invoke("new", "my-cnn", "--from", "mnist-cnn", "--add-to-nightly", "--dry")
    assert process.returncode == 0, process.stderr
    assert "would write recipes/my-cnn/train.py" in process.stdout
    assert "would write recipes/my-cnn/launch/k8s-mpijob.yaml" in process.stdout
    assert "would add my-cnn to ci/nightly/matrix.yaml" in process.stdout
    assert not (REPO / "recipes" / "my-cnn").exists()
    assert (REPO / "ci" / "nightly" / "matrix.yaml").read_text() == MATRIX


# -- real runs, in a copy of the repository ----------------------------------------------------------

@pytest.fixture
def checkout(tmp_path):
    """The folders `invoke new` reads and writes, copied: the task runs there, not in this checkout."""
    root = tmp_path / "tf-recipes"
    for folder in ("tasks", "commands", "common", "tools", "ci", "recipes", "stacks"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def invoke_in(root, *args):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=root, capture_output=True, text=True,
                          timeout=120)


def snapshot(root) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_a_recipe_made_by_invoke_new_is_copied_again_with_a_one_letter_name(checkout):
    assert invoke_in(checkout, "new", "n", "--from", "mnist-cnn", "--add-to-nightly").returncode == 0
    folder = checkout / "recipes" / "n"
    (folder / "assets").mkdir()
    (folder / "assets" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xffn recipes/n/")
    for run_output in ("data/train/0/a.png", "results/20260101-single/results.json", "checkpoints/ckpt-1.index"):
        (folder / run_output).parent.mkdir(parents=True, exist_ok=True)
        (folder / run_output).write_bytes(b"not source")
    before = snapshot(checkout)
    matrix = checkout / "ci" / "nightly" / "matrix.yaml"

    process = invoke_in(checkout, "new", "x", "--from", "n", "--add-to-nightly")
    assert process.returncode == 0, process.stderr
    assert "left out recipes/n/data/ " in process.stdout and "left out recipes/n/results/ " in process.stdout
    copy = checkout / "recipes" / "x"
    ast.parse((copy / "train.py").read_text())
    assert (copy / "train.py").read_text() == scaffold.rename_python(
        (REPO / "recipes" / "mnist-cnn" / "train.py").read_text(), "mnist-cnn", "x")
    assert (copy / "assets" / "logo.png").read_bytes() == (folder / "assets" / "logo.png").read_bytes()
    assert not any((copy / part).exists() for part in ("data", "results", "checkpoints"))
    after = snapshot(checkout)
    assert {path: content for path, content in after.items() if path in before and path != "ci/nightly/matrix.yaml"} \
        == {path: content for path, content in before.items() if path != "ci/nightly/matrix.yaml"}
    # matrix.yaml: its lines as they were, with the new entry and the tiers' new name inserted.
    old = before["ci/nightly/matrix.yaml"].decode()
    entry = scaffold.matrix_entry(old, "n", "x")
    assert matrix.read_text().replace(entry, "", 1).replace(", x]", "]") == old
    nightly.load_matrix(str(matrix))


def test_a_recipe_without_a_nightly_entry_is_copied_without_one(checkout):
    assert invoke_in(checkout, "new", "plain", "--from", "mnist-cnn").returncode == 0
    before = snapshot(checkout)
    refused = invoke_in(checkout, "new", "again", "--from", "plain", "--add-to-nightly")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("error: ci/nightly/matrix.yaml has no entry for plain to copy: leave out "
                                     "--add-to-nightly and add an entry for again under `recipes:`")
    assert snapshot(checkout) == before  # nothing written
    process = invoke_in(checkout, "new", "again", "--from", "plain")
    assert process.returncode == 0, process.stderr
    assert "plain has no entry there to copy" in process.stdout
    assert 'RECIPE = "again"' in (checkout / "recipes" / "again" / "train.py").read_text()
    assert (checkout / "ci" / "nightly" / "matrix.yaml").read_bytes() == before["ci/nightly/matrix.yaml"]
