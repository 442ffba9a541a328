"""The pure parts of tools/gpu_libraries.py: which major version of each CUDA library TensorFlow's own
`and-cuda` requirements ask for. (The check itself runs in the GPU images: tests/nightly.)"""
import importlib.util

from helpers import REPO

# A script, not a module of a package: loaded from its file, as images/current runs it.
_SPEC = importlib.util.spec_from_file_location("gpu_libraries", REPO / "tools" / "gpu_libraries.py")
gpu_libraries = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gpu_libraries)

# tensorflow 2.21.0's METADATA, as its wheel has it (the and-cuda lines and two others).
REQUIRES = [
    "numpy>=1.26.0",
    'nvidia-cublas-cu12<13.0,>=12.5.3.2; extra == "and-cuda"',
    'nvidia-cuda-runtime-cu12<13.0,>=12.5.82; extra == "and-cuda"',
    'nvidia-cudnn-cu12<10.0,>=9.3.0.75; extra == "and-cuda"',
    'nvidia-cufft-cu12<12.0,>=11.2.3.61; extra == "and-cuda"',
    'nvidia-nccl-cu12<3.0,>=2.27.7; extra == "and-cuda"',
    'tensorflow-io-gcs-filesystem>=0.23.1; (sys_platform != "win32" and python_version < "3.13") and '
    'extra == "gcs-filesystem"',
]


def test_the_and_cuda_requirements_are_found_by_wheel_family():
    found = gpu_libraries.cuda_requirements(REQUIRES)
    assert sorted(found) == ["nvidia-cublas", "nvidia-cuda-runtime", "nvidia-cudnn", "nvidia-cufft", "nvidia-nccl"]
    assert str(found["nvidia-cudnn"].specifier) == "<10.0,>=9.3.0.75"


def test_the_major_version_is_the_lower_bounds():
    found = gpu_libraries.cuda_requirements(REQUIRES)
    majors = {family: gpu_libraries.required_major(found[family]) for family in found}
    assert majors == {"nvidia-cublas": 12, "nvidia-cuda-runtime": 12, "nvidia-cudnn": 9, "nvidia-cufft": 11,
                      "nvidia-nccl": 2}
    assert gpu_libraries.required_major(None) is None


def test_every_library_names_a_wheel_family_tensorflow_asks_for():
    families = set(gpu_libraries.cuda_requirements(REQUIRES))
    assert {family for _stem, family in gpu_libraries.LIBRARIES.values()} - families == {
        "nvidia-curand", "nvidia-cusolver", "nvidia-cusparse", "nvidia-nvjitlink"}  # left out of REQUIRES above
