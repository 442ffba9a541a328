# A reconstruction of tensorflow/tensorflow:2.21.0-gpu, the current stack's former GPU base, which
# cannot be pulled here (no registry answers). Its upstream recipe, tensorflow/build's
# tensorflow_runtime_dockerfiles (gpu.Dockerfile and gpu.packages.txt, unchanged since 2024-12):
# FROM nvidia/cuda:12.3.0-base-ubuntu22.04, apt packages of the CUDA 12.3 libraries and
# libcudnn8=8.9.6.50-1+cuda12.2 (on the loader's default path), Python 3.11, then a plain
# `pip install tensorflow` (no `[and-cuda]`). Here the same libraries come from NVIDIA's PyPI wheels
# (CUDA 12.3.2's component versions, cuDNN 8.9.6.50), their folders in the loader's cache as apt's
# would be, on Debian bookworm's Python 3.11. tests/nightly/test_gpu_images.py shows that
# tools/gpu_libraries.py fails on it.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive

# Unpinned apt packages, as upstream's: a stable release only ships security fixes.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && /usr/bin/python3 -m venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN --mount=type=secret,id=pipcert \
    --mount=type=cache,target=/root/.cache/pip \
    if [ -f /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi \
 && pip install \
        nvidia-cuda-runtime-cu12==12.3.101 \
        nvidia-cublas-cu12==12.3.4.1 \
        nvidia-cufft-cu12==11.0.12.1 \
        nvidia-curand-cu12==10.3.4.107 \
        nvidia-cusolver-cu12==11.5.4.101 \
        nvidia-cusparse-cu12==12.2.0.103 \
        nvidia-nvjitlink-cu12==12.3.101 \
        nvidia-cuda-nvrtc-cu12==12.3.107 \
        nvidia-cuda-cupti-cu12==12.3.101 \
        nvidia-cudnn-cu12==8.9.6.50 \
 && site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
 && find "${site}/nvidia" -mindepth 2 -maxdepth 2 -type d -name lib | sort > /etc/ld.so.conf.d/cuda-12-3.conf \
 && ldconfig \
 && pip install tensorflow==2.21.0
