"""The Docker fixtures (tests/docker_images.py), for every integration test."""
from docker_images import cpu_base, engine  # noqa: F401
