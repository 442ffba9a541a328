"""Whether a GPU image's CUDA libraries are the ones its TensorFlow was built for, checked without a GPU.

    python tools/gpu_libraries.py          # in the image; exit 0 when every library passes, else 1

TensorFlow finds its CUDA libraries at run time, by name (libcudnn.so.9, ...), only once it sees a GPU,
so an image whose libraries do not match trains on the CPU with a warning, or stops at our GPU count
check. This check needs no GPU. It takes what the installed TensorFlow says it was built for,
`tf.sysconfig.get_build_info()` (cuda_version, cudnn_version), and what its wheel asks for under the
`and-cuda` extra (nvidia-cudnn-cu12>=9.3.0.75,<10.0, ...). For each library TensorFlow loads on a GPU
(cudart, cublas, cublasLt, cudnn, cufft, curand, cusolver, cusparse, nvjitlink, nccl) it then:

- loads it by the name TensorFlow asks the loader for (lib<name>.so.<major>, the major from the
  `and-cuda` requirement, which for cudart and cudnn must agree with the build info), through the
  image's loader path, as TensorFlow does;
- reads the version of what loaded (the NVIDIA wheel that installed the file, else the version in the
  file's real name) and holds it to the `and-cuda` requirement.

A library that is missing, fails to load or has another version fails the check, with one line
naming what was expected and what was found. What only a GPU can show (that the driver accepts these
libraries and TensorFlow registers the device) is left to a run with one. The file imports only the
standard library and `packaging` (a dependency of TensorFlow), so it runs as a single file
in an image that has none of this repository.
"""
from __future__ import annotations

import ctypes
import glob
import importlib.metadata as metadata
import os
import re
import subprocess
import sys

from packaging.requirements import Requirement

# name in the report -> (the file stem TensorFlow loads, the family of the NVIDIA wheel that ships it)
LIBRARIES = {
    "cudart": ("libcudart.so", "nvidia-cuda-runtime"),
    "cublas": ("libcublas.so", "nvidia-cublas"),
    "cublasLt": ("libcublasLt.so", "nvidia-cublas"),
    "cudnn": ("libcudnn.so", "nvidia-cudnn"),
    "cufft": ("libcufft.so", "nvidia-cufft"),
    "curand": ("libcurand.so", "nvidia-curand"),
    "cusolver": ("libcusolver.so", "nvidia-cusolver"),
    "cusparse": ("libcusparse.so", "nvidia-cusparse"),
    "nvjitlink": ("libnvJitLink.so", "nvidia-nvjitlink"),
    "nccl": ("libnccl.so", "nvidia-nccl"),
}
# The build info key whose major version each of these must have.
BUILD_INFO_KEYS = {"cudart": "cuda_version", "cudnn": "cudnn_version"}
EXTRA = "and-cuda"


def tensorflow_distribution() -> metadata.Distribution:
    for name in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
    raise SystemExit("gpu_libraries: no TensorFlow is installed beside this Python")


def cuda_requirements(requires: list[str]) -> dict[str, Requirement]:
    """The `and-cuda` requirements of TensorFlow's wheel, by wheel family (`nvidia-cudnn` for
    nvidia-cudnn-cu12)."""
    found = {}
    for line in requires:
        requirement = Requirement(line)
        if requirement.marker is None or not requirement.marker.evaluate({"extra": EXTRA}):
            continue
        if requirement.marker.evaluate({"extra": ""}):
            continue  # not specific to the extra
        family = re.sub(r"-cu\d+$", "", requirement.name.lower())
        found[family] = requirement
    return found


def required_major(requirement: Requirement | None) -> int | None:
    """The major version a requirement such as `>=9.3.0.75,<10.0` allows, or None when open."""
    if requirement is None:
        return None
    lower = [s.version for s in requirement.specifier if s.operator in (">=", "==", "~=", ">")]
    return int(lower[0].split(".")[0]) if lower else None


def wheel_files() -> dict[str, metadata.Distribution]:
    """Every file of an installed nvidia-* wheel (real path) -> the wheel."""
    owners = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if not name.startswith("nvidia-"):
            continue
        for file in dist.files or ():
            if ".so" in file.name:
                owners[os.path.realpath(dist.locate_file(file))] = dist
    return owners


def loaded_path(filename: str) -> str | None:
    """Where the library just loaded under `filename` came from (/proc/self/maps lists real paths)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rstrip("\n").split(maxsplit=5)[-1]
            if os.path.basename(path).startswith(filename):
                return path
    return None


def other_versions(stem: str) -> list[str]:
    """The lib<name>.so.* files the loader could find under other versions (for the report)."""
    names = set()
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
        names.update(re.findall(rf"\b({re.escape(stem)}\.\d+)\b", cache))
    except OSError:
        pass
    for folder in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if folder:
            names.update(os.path.basename(p) for p in glob.glob(os.path.join(folder, stem + ".*")))
    return sorted(names)


def check_library(name: str, major: int | None, requirement: Requirement | None,
                  owners: dict[str, metadata.Distribution]) -> tuple[bool, str]:
    """(passed, one line) for one library."""
    stem, _family = LIBRARIES[name]
    if major is None:
        return False, f"{name}: TensorFlow names no version for it (no `{EXTRA}` requirement); cannot check"
    filename = f"{stem}.{major}"
    try:
        ctypes.CDLL(filename, mode=ctypes.RTLD_GLOBAL)
    except OSError as error:
        others = [n for n in other_versions(stem) if n != filename]
        seen = f"; the loader finds {', '.join(others)}" if others else ""
        return False, f"{name}: {filename} does not load ({error}){seen}"
    path = loaded_path(filename) or filename
    owner = owners.get(os.path.realpath(path))
    if owner is not None:
        version, source = owner.version, f"{owner.metadata['Name']} {owner.version}"
    else:
        suffix = os.path.basename(os.path.realpath(path)).removeprefix(stem + ".")
        version, source = (suffix if re.fullmatch(r"\d+(\.\d+)+", suffix) else None), path
    wanted = f"{requirement.name}{requirement.specifier}" if requirement is not None else "no version asked"
    if requirement is not None and version is not None and not requirement.specifier.contains(version):
        return False, f"{name}: {filename} loads from {path}, but it is {source}, not {wanted}"
    return True, f"{name}: {filename} loads from {path} ({source}; TensorFlow asks {wanted})"


def main() -> int:
    dist = tensorflow_distribution()
    from tensorflow import sysconfig  # after the checks above: importing TensorFlow takes seconds
    build = sysconfig.get_build_info()
    print(f"{dist.metadata['Name']} {dist.version}: built with CUDA {build.get('cuda_version')}, "
          f"cuDNN {build.get('cudnn_version')} (tf.sysconfig.get_build_info())")
    if not build.get("is_cuda_build"):
        print(f"FAIL: {dist.metadata['Name']} {dist.version} is not a CUDA build; a GPU image needs `tensorflow`")
        return 1
    requirements = cuda_requirements(dist.requires or [])
    owners = wheel_files()
    failures = 0
    for name, (_stem, family) in LIBRARIES.items():
        requirement = requirements.get(family)
        major = required_major(requirement)
        built = str(build.get(BUILD_INFO_KEYS.get(name), "") or "")
        if built:
            built_major = int(built.split(".")[0])
            if major is not None and major != built_major:
                failures += 1
                print(f"FAIL {name}: TensorFlow's `{EXTRA}` asks for {requirement.name}{requirement.specifier}, "
                      f"but it was built with {BUILD_INFO_KEYS[name]} {built}")
                continue
            major = built_major
        passed, line = check_library(name, major, requirement, owners)
        failures += not passed
        print(("ok   " if passed else "FAIL ") + line)
    verdict = "every CUDA library TensorFlow loads on a GPU is there, loads and matches" if not failures \
        else f"{failures} of {len(LIBRARIES)} CUDA libraries missing, failing to load or of another version"
    print(("PASS: " if not failures else "FAIL: ") + verdict)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
