"""Unit tests of the container command builders: argv in, argv out, nothing runs."""
from __future__ import annotations

import pytest

from commands.containers import (
    CONTAINER_WORKDIR,
    SIF_COMPRESSION_ARGS,
    build_apptainer_build_command,
    build_apptainer_exec_command,
    build_debian_base_commands,
    build_debootstrap_command,
    build_docker_build_command,
    build_docker_import_command,
    build_docker_run_command,
    build_docker_save_command,
    build_library_wheel_command,
    build_rootfs_tar_command,
    build_sif_from_image_commands,
    docker_gpus_value,
    missing_image_problem,
    render_apptainer_definition,
)


def flag_values(argv, flag):
    """Every value that follows `flag` in argv."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def run(**overrides):
    kwargs = dict(gpus=0, env={})
    kwargs.update(overrides)
    return build_docker_run_command("tf-recipes/mnist-cnn:latest", ["python", "recipes/mnist-cnn/train.py"],
                                    **kwargs)


# --- Debian base image --------------------------------------------------------------------------

def test_debootstrap_minbase_bookworm_by_default():
    assert build_debootstrap_command("/var/tmp/rootfs") == [
        "debootstrap", "--variant=minbase", "bookworm", "/var/tmp/rootfs"]


def test_debootstrap_mirror_comes_last():
    argv = build_debootstrap_command("/r", suite="trixie", variant="buildd", mirror="http://mirror/debian")
    assert argv == ["debootstrap", "--variant=buildd", "trixie", "/r", "http://mirror/debian"]


@pytest.mark.parametrize("rootfs", ["/", "//", "/./"])
def test_debootstrap_refuses_the_root_directory(rootfs):
    with pytest.raises(ValueError, match="running system"):
        build_debootstrap_command(rootfs)


def test_debootstrap_rejects_unknown_variant():
    with pytest.raises(ValueError, match="'mini'"):
        build_debootstrap_command("/r", variant="mini")


def test_rootfs_tar_packs_the_tree_without_apt_caches():
    argv = build_rootfs_tar_command("/var/tmp/rootfs", "/var/tmp/debian.tar")
    assert argv[:3] == ["tar", "-C", "/var/tmp/rootfs"]
    assert argv[-4:] == ["-c", "-f", "/var/tmp/debian.tar", "."]
    assert "--exclude=./var/lib/apt/lists/*" in argv
    assert "--exclude=./var/cache/apt/archives/*.deb" in argv


def test_docker_import_reads_the_tarball():
    assert build_docker_import_command("/t.tar", "tf-recipes/debian:bookworm", docker="/usr/bin/docker") == [
        "/usr/bin/docker", "import", "/t.tar", "tf-recipes/debian:bookworm"]


def test_debian_base_commands_chain_through_the_same_paths():
    debootstrap, tar, docker_import = build_debian_base_commands("/r", "/t.tar", "img:tag")
    assert debootstrap[-1] == "/r" and tar[2] == "/r"
    assert "/t.tar" in tar and docker_import[2] == "/t.tar"
    assert docker_import[-1] == "img:tag"


# --- docker build ---------------------------------------------------------------------------------

def test_docker_build_uses_buildkit_with_the_ca_bundle_as_a_secret():
    argv, env = build_docker_build_command(
        "recipes/mnist-cnn/Dockerfile", ".", "tf-recipes/mnist-cnn:latest",
        build_args={"BASE_IMAGE": "tf-recipes/cpu-base:latest"}, labels={},
        ca_bundle="/etc/ssl/certs/ca-certificates.crt", docker="/usr/bin/docker")
    assert env == {"DOCKER_BUILDKIT": "1"}
    assert argv[:2] == ["/usr/bin/docker", "build"]
    assert flag_values(argv, "--secret") == ["id=pipcert,src=/etc/ssl/certs/ca-certificates.crt"]
    assert flag_values(argv, "-f") == ["recipes/mnist-cnn/Dockerfile"]
    assert flag_values(argv, "-t") == ["tf-recipes/mnist-cnn:latest"]
    assert flag_values(argv, "--build-arg") == ["BASE_IMAGE=tf-recipes/cpu-base:latest"]
    assert "--progress=plain" in argv
    assert argv[-1] == "."


def test_docker_build_without_bundle_has_no_secret():
    argv, _ = build_docker_build_command("D", "ctx", "t:1", {}, {}, None)
    assert "--secret" not in argv
    assert argv[-1] == "ctx"


def test_docker_build_args_and_labels_keep_order_and_skip_none():
    argv, _ = build_docker_build_command(
        "D", ".", "t:1", build_args={"A": "1", "GIT_REVISION": None, "B": "x y"},
        labels={"org.opencontainers.image.revision": "abc123"}, ca_bundle=None)
    assert flag_values(argv, "--build-arg") == ["A=1", "B=x y"]
    assert flag_values(argv, "--label") == ["org.opencontainers.image.revision=abc123"]


def test_docker_build_progress_can_be_left_to_the_client():
    argv, _ = build_docker_build_command("D", ".", "t:1", {}, {}, None, progress="")
    assert not any(arg.startswith("--progress") for arg in argv)


def test_docker_build_builds_a_target_stage_only_when_asked():
    argv, _ = build_docker_build_command("D", ".", "t:1", {}, {}, None, target="gpu")
    assert flag_values(argv, "--target") == ["gpu"] and argv[-1] == "."
    assert "--target" not in build_docker_build_command("D", ".", "t:1", {}, {}, None)[0]
    with pytest.raises(ValueError, match="target name 'a b'"):
        build_docker_build_command("D", ".", "t:1", {}, {}, None, target="a b")


@pytest.mark.parametrize("bad", [{"": "1"}, {"A=B": "1"}, {"A B": "1"}])
def test_docker_build_rejects_bad_build_arg_names(bad):
    with pytest.raises(ValueError, match="build arg"):
        build_docker_build_command("D", ".", "t:1", bad, {}, None)


def test_docker_build_rejects_a_bundle_path_with_a_comma():
    with pytest.raises(ValueError, match="comma"):
        build_docker_build_command("D", ".", "t:1", {}, {}, "/certs/a,b.crt")


# --- docker run: GPUs -------------------------------------------------------------------------------

@pytest.mark.parametrize("gpus, expected", [
    ("all", "all"),
    (2, "2"),
    ("2", "2"),
    ([0, 1], '"device=0,1"'),
    ((3,), '"device=3"'),
    ("0,1", '"device=0,1"'),
])
def test_gpus_values(gpus, expected):
    assert docker_gpus_value(gpus) == expected
    assert flag_values(run(gpus=gpus), "--gpus") == [expected]


@pytest.mark.parametrize("gpus", [0, "0"])
def test_no_gpus_means_no_gpus_flag(gpus):
    assert "--gpus" not in run(gpus=gpus)


@pytest.mark.parametrize("gpus", [-1, True, [], [0, 0], [-1], "two", "0,x"])
def test_bad_gpus_are_rejected_with_the_value(gpus):
    with pytest.raises(ValueError, match="gpus="):
        run(gpus=gpus)


# --- docker run: the rest -----------------------------------------------------------------------------

def test_run_defaults_follow_nvidia_recommendations():
    argv = run()
    assert argv[:4] == ["docker", "run", "--rm", "--init"]
    assert "--ipc=host" in argv
    assert flag_values(argv, "--ulimit") == ["memlock=-1", "stack=67108864"]
    assert "--privileged" not in argv
    assert "--cap-add" not in argv
    assert "-it" not in argv
    # Docker ignores --shm-size with the host's IPC namespace, so it is not given.
    assert "--shm-size" not in argv


def test_run_passes_stop_signals_on_and_waits_for_the_checkpoint():
    argv = run()
    # PID 1 in a container ignores signals it has no handler for: --init forwards them.
    assert "--init" in argv[:argv.index("tf-recipes/mnist-cnn:latest")]
    assert flag_values(argv, "--stop-timeout") == ["60"]
    assert "--stop-timeout" not in run(stop_timeout=None)


def test_run_image_comes_before_the_inner_command():
    argv = run()
    i = argv.index("tf-recipes/mnist-cnn:latest")
    assert argv[i + 1:] == ["python", "recipes/mnist-cnn/train.py"]


def test_shm_size_applies_with_a_private_ipc_namespace():
    argv = run(ipc=None, shm_size="8g")
    assert not any(arg.startswith("--ipc") for arg in argv)
    assert flag_values(argv, "--shm-size") == ["8g"]


def test_memlock_and_stack_can_be_left_alone():
    assert flag_values(run(memlock=None), "--ulimit") == ["stack=67108864"]
    assert "--ulimit" not in run(memlock=None, stack=None)


def test_data_is_read_only_and_results_read_write():
    argv = run(data_dir="/srv/mnist", results_dir="/home/me/results")
    assert flag_values(argv, "--mount") == [
        "type=bind,source=/srv/mnist,target=/data,readonly",
        "type=bind,source=/home/me/results,target=/results",
    ]


def test_relative_mount_paths_are_rejected():
    with pytest.raises(ValueError, match="'data'.*absolute"):
        run(data_dir="data")


def test_user_env_network_name_and_terminal():
    argv = run(user="1000:1000", env={"TF_CPP_MIN_LOG_LEVEL": "2", "SEED": "7"}, network="host",
               name="mnist-1", interactive=True)
    assert flag_values(argv, "-u") == ["1000:1000"]
    assert flag_values(argv, "-e") == ["TF_CPP_MIN_LOG_LEVEL=2", "SEED=7"]
    forwarded = run(env={"SEED": "7"}, forward_env=["TF_RECIPES_FAULT_SLOW_STEP"])
    assert flag_values(forwarded, "-e") == ["SEED=7", "TF_RECIPES_FAULT_SLOW_STEP"]  # the client's own value
    assert flag_values(argv, "--network") == ["host"]
    assert flag_values(argv, "--name") == ["mnist-1"]
    assert "-it" in argv
    # Options all come before the image; anything after it goes to the inner command.
    image_at = argv.index("tf-recipes/mnist-cnn:latest")
    assert max(argv.index(f) for f in ("-u", "-e", "--network", "--name", "-it")) < image_at


def test_profile_adds_sys_admin_and_nothing_broader():
    argv = run(profile=True)
    assert flag_values(argv, "--cap-add") == ["SYS_ADMIN"]
    assert "--privileged" not in argv


@pytest.mark.parametrize("overrides", [{}, {"profile": True}, {"user": "1000:1000", "interactive": True}],
                         ids=["defaults", "profile", "user"])
def test_no_process_in_the_container_gains_privileges(overrides):
    """Not one of NVIDIA's flags: setuid and file-capability binaries give nothing inside, whatever else is asked."""
    argv = run(**overrides)
    assert flag_values(argv, "--security-opt") == ["no-new-privileges"]
    assert argv.index("--security-opt") < argv.index("tf-recipes/mnist-cnn:latest")


def test_run_uses_the_given_docker_client():
    assert run(docker="/usr/bin/docker")[0] == "/usr/bin/docker"


# --- Apptainer ------------------------------------------------------------------------------------------

def test_apptainer_build_from_the_docker_daemon():
    assert build_apptainer_build_command("mnist.sif", "tf-recipes/mnist-cnn:latest") == [
        "apptainer", "build", "mnist.sif", "docker-daemon://tf-recipes/mnist-cnn:latest"]


def test_apptainer_build_adds_the_tag_docker_daemon_needs():
    assert build_apptainer_build_command("m.sif", "localhost:5000/mnist")[-1] == \
        "docker-daemon://localhost:5000/mnist:latest"


def test_apptainer_build_from_a_definition_file():
    assert build_apptainer_build_command("m.sif", "mnist-cnn.def")[-1] == "mnist-cnn.def"


def test_apptainer_build_from_a_docker_save_tarball():
    assert build_apptainer_build_command("m.sif", "/tmp/b/image.tar") == [
        "apptainer", "build", "m.sif", "docker-archive:/tmp/b/image.tar"]


def test_a_sif_is_made_from_the_image_through_docker_save_then_docker_archive():
    save, build = build_sif_from_image_commands("tf-recipes/mnist-cnn:cpu", "/b/x.sif", "/b/x.tar",
                                                docker="/usr/bin/docker", apptainer="/opt/apptainer")
    assert save == build_docker_save_command("tf-recipes/mnist-cnn:cpu", "/b/x.tar", docker="/usr/bin/docker") == [
        "/usr/bin/docker", "save", "-o", "/b/x.tar", "tf-recipes/mnist-cnn:cpu"]
    assert build == ["/opt/apptainer", "build", "/b/x.sif", "docker-archive:/b/x.tar"]
    with pytest.raises(ValueError, match="must end in .tar"):
        build_sif_from_image_commands("tf-recipes/mnist-cnn:cpu", "/b/x.sif", "/b/x.tgz")


def test_sif_compression_gzip_is_apptainers_default_and_zstd_is_passed_to_mksquashfs():
    assert build_apptainer_build_command("m.sif", "i.tar", compression="gzip") == build_apptainer_build_command(
        "m.sif", "i.tar")
    argv = build_apptainer_build_command("m.sif", "i.tar", compression="zstd")
    assert flag_values(argv, "--mksquashfs-args") == [SIF_COMPRESSION_ARGS["zstd"]] == \
        ["-comp zstd -Xcompression-level 3"]
    assert argv[-2:] == ["m.sif", "docker-archive:i.tar"]
    assert flag_values(build_apptainer_build_command("m.sif", "m.def", compression="zstd"), "--mksquashfs-args")
    with pytest.raises(ValueError, match="'lz4' is unknown; use one of gzip, zstd"):
        build_apptainer_build_command("m.sif", "i.tar", compression="lz4")


def test_library_wheel_is_built_without_dependencies_or_a_download():
    argv, env = build_library_wheel_command("/src/tf-recipes", "recipes/mnist-cnn/wheels", python="/venv/bin/python")
    assert env == {"SOURCE_DATE_EPOCH": "315532800"}  # the same sources make the same wheel (tests/unit/test_library)
    assert argv == ["/venv/bin/python", "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", "recipes/mnist-cnn/wheels", "/src/tf-recipes"]
    with pytest.raises(ValueError, match="wheels is empty"):
        build_library_wheel_command("/src", "")


def test_apptainer_definition_bootstraps_from_the_base_and_installs_the_recipe():
    text = render_apptainer_definition("nvcr.io/nvidia/tensorflow:25.02-tf2-py3", "cassava-resnet")
    lines = [line.strip() for line in text.splitlines()]
    assert lines[:2] == ["Bootstrap: docker", "From: nvcr.io/nvidia/tensorflow:25.02-tf2-py3"]
    # Built from the recipe folder alone: its files into the image's recipes/NAME, the library from wheels/.
    files = lines[lines.index("%files") + 1:lines.index("%post") - 1]
    folder = f"{CONTAINER_WORKDIR}/recipes/cassava-resnet/"
    assert files == [f"*.py {folder}", f"requirements.txt {folder}", f"README.md {folder}", f"launch {folder}",
                     "wheels /tmp/tf-recipes-wheels"]
    assert not any(line.split()[0].startswith(("common", "tools", "stacks", "recipes/", "..")) for line in files)
    assert "--find-links /tmp/tf-recipes-wheels tf-recipes" in lines
    assert "python3 -m tf_recipes.operations.constraints ngc-25.02 > /tmp/stack.txt" in lines
    assert f"-c /tmp/stack-constraints.txt -r {folder}requirements.txt \"$tensorflow\"" in lines
    assert not any("PYTHONPATH" in line for line in lines)
    # The snippet that pins the installed TensorFlow must survive the f-string as Python code.
    assert 'print(f"{d}=={m.version(d)}")' in text
    for section in ("%labels", "%files", "%post"):
        assert section in lines


def test_apptainer_definition_accepts_a_docker_uri_and_rejects_paths_as_recipes():
    assert "From: ubuntu:24.04" in render_apptainer_definition("docker://ubuntu:24.04", "mnist-cnn")
    with pytest.raises(ValueError, match="'../x'"):
        render_apptainer_definition("ubuntu:24.04", "../x")


def test_apptainer_exec_cpu_has_no_nv_and_binds_like_docker():
    argv = build_apptainer_exec_command("mnist.sif", ["python", "recipes/mnist-cnn/train.py"], gpus=0,
                                        env={"SEED": "7"}, data_dir="/srv/mnist", results_dir="/scratch/r")
    assert argv[:3] == ["apptainer", "exec", "--cleanenv"]
    assert "--nv" not in argv
    assert flag_values(argv, "--bind") == ["/srv/mnist:/data:ro", "/scratch/r:/results"]
    assert flag_values(argv, "--env") == ["SEED=7"]
    assert flag_values(argv, "--pwd") == [CONTAINER_WORKDIR]
    assert argv[argv.index("mnist.sif") + 1:] == ["python", "recipes/mnist-cnn/train.py"]


@pytest.mark.parametrize("gpus, visible", [("all", None), (2, "0,1"), ([2, 3], "2,3")])
def test_apptainer_exec_gpus(gpus, visible):
    argv = build_apptainer_exec_command("m.sif", ["true"], gpus=gpus, env={})
    assert "--nv" in argv
    cuda = [v for v in flag_values(argv, "--env") if v.startswith("CUDA_VISIBLE_DEVICES=")]
    assert cuda == ([] if visible is None else [f"CUDA_VISIBLE_DEVICES={visible}"])


def test_apptainer_exec_rejects_relative_binds():
    with pytest.raises(ValueError, match="--results-dir"):
        build_apptainer_exec_command("m.sif", [], gpus=0, env={}, results_dir="results")


# --- images another task makes -------------------------------------------------------------------

MAKERS = {"tf-recipes/gpu-base:current": "invoke images.gpu --stack current",
          "tf-recipes/debian": "invoke images.bootstrap"}


@pytest.mark.parametrize("image,local,expected", [
    ("tf-recipes/gpu-base:current", [], "image tf-recipes/gpu-base:current is not built; run `invoke images.gpu "
                                        "--stack current` first"),
    ("tf-recipes/gpu-base:current", ["tf-recipes/gpu-base:current"], None),
    ("tf-recipes/debian", ["tf-recipes/debian:latest"], None),  # no tag: docker's :latest
    ("nvcr.io/nvidia/tensorflow:25.02-tf2-py3", [], None),  # no task makes it: docker pulls it
    ("nvcr.io/nvidia/tensorflow:25.02-tf2-py3", None, "no Docker engine answers"),
])
def test_a_missing_image_that_a_task_makes_names_that_task(image, local, expected):
    problem = missing_image_problem(image, local, MAKERS)
    assert problem == expected if expected is None or expected.startswith("image ") else expected in problem
