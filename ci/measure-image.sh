#!/usr/bin/env bash
# Measure a recipe image on its base: the bytes the recipe layers add, and the time of a rebuild
# after a one-line change to train.py (made in a copy of the checkout, never in yours).
#
#   bash ci/measure-image.sh mnist-cnn [cpu|ngc]
set -euo pipefail
cd "$(dirname "$0")/.."
recipe="${1:?usage: ci/measure-image.sh RECIPE [cpu|ngc]}"
base="${2:-cpu}"
invoke=".venv/bin/invoke"
image="tf-recipes/${recipe}:${base}"
base_image=$([ "$base" = cpu ] && echo tf-recipes/cpu-base:latest || echo nvcr.io/nvidia/tensorflow:25.02-tf2-py3)

"$invoke" build "$recipe" --base "$base" >/dev/null 2>&1
docker=$("$invoke" build "$recipe" --base "$base" --dry | sed -n 's/^+ DOCKER_BUILDKIT=1 \([^ ]*\) build .*/\1/p')
size() { "$docker" image inspect -f '{{.Size}}' "$1"; }
echo "recipe layers: $(( $(size "$image") - $(size "$base_image") )) bytes on top of $base_image ($(size "$image") in all)"

copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
git ls-files -z common tools recipes .dockerignore | xargs -0 cp --parents -t "$copy"
echo "# one-line change $(date +%s%N)" >> "$copy/recipes/$recipe/train.py"
argv=$("$invoke" build "$recipe" --base "$base" --dry | sed -n 's/^+ //p')
start=$(date +%s.%N)
(cd "$copy" && eval "$argv" >/dev/null 2>&1)
end=$(date +%s.%N)
echo "rebuild after a one-line change to train.py: $(echo "$end - $start" | bc) s"
