"""Scripts that run in the images' builds, outside the library (tf_recipes, in common/) and outside every
recipe: nothing imports this folder as a package at run time.

- `gpu_libraries`: whether a GPU image's CUDA libraries are the ones its TensorFlow was built for, without
  a GPU (`python tools/gpu_libraries.py`; images/current's gpu target runs it while it builds).
- `horovod_cmake.sh`: the cmake Horovod is compiled with (HOROVOD_CMAKE), CMake's RelWithDebInfo flags
  without -g; images/cpu's horovod-build stage and `bash ci/setup.sh --horovod` both use it.
"""
