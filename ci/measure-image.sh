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
# The recipe folder is the build context; its wheels/ holds the library's wheel the first build made.
git ls-files -z "recipes/$recipe" | xargs -0 cp --parents -t "$copy"
cp -r "recipes/$recipe/wheels" "$copy/recipes/$recipe/"
echo "# one-line change $(date +%s%N)" >> "$copy/recipes/$recipe/train.py"
argv=$("$invoke" build "$recipe" --base "$base" --dry | sed -n 's/^+ \(DOCKER_BUILDKIT=1 .* build .*\)/\1/p')
start=$(date +%s.%N)
(cd "$copy" && eval "$argv" >/dev/null 2>&1)
end=$(date +%s.%N)
echo "rebuild after a one-line change to train.py: $(echo "$end - $start" | bc) s"
