#!/usr/bin/env bash
# `make release`: everything a user installs memsync from, into one folder (default dist/), from this checkout.
#
#   release/release.sh [DIST]          RELEASE_IMAGE=memsync:TAG archives that image instead of building one
#
# 1. the wheel and the sdist (python -m build);
# 2. the image (`make image IMAGE=memsync TAG=VERSION`, BASE=... and the other image settings passed through)
#    as an OCI archive, memsync-VERSION.oci.tar (skopeo, gzip layers), and its manifest digest in
#    memsync-VERSION.image-digest: the digest a registry keeps when the archive is pushed as it is
#    (`skopeo copy --preserve-digests oci-archive:... docker://REGISTRY/memsync:VERSION`);
# 3. the chart, packaged by `make chart` with that digest in its values (image.digest), so an install pins
#    the image by digest and needs only the repository: memsync-VERSION.tgz and index.yaml;
# 4. SHA256SUMS of every file.
# Needs docker and skopeo for the image, helm for the chart (tests/tools/build.sh builds it where Go is).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
dist="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' operator/memsync/__init__.py)"
for tool in docker skopeo; do
  command -v "$tool" >/dev/null || { echo "release: $tool is needed (the image archive)" >&2; exit 2; }
done
say() { echo "[release] $*" >&2; }

# An earlier release's files go (nothing else in the folder is touched).
rm -f -- "$dist"/memsync-* "$dist/index.yaml" "$dist/SHA256SUMS" "$dist/values-image.yaml"
say "wheel and sdist"
"$python" -m build --outdir "$dist" . >&2

image="${RELEASE_IMAGE:-}"
if [[ -z "$image" ]]; then
  say "image memsync:$version"
  make --no-print-directory image IMAGE=memsync TAG="$version" >&2
  image="memsync:$version"
fi
archive="$dist/memsync-$version.oci.tar"
say "image archive $(basename "$archive") from $image"
skopeo copy --quiet "docker-daemon:$image" "oci-archive:$archive:$version" >&2
digest="$(skopeo manifest-digest <(skopeo inspect --raw "oci-archive:$archive"))"
echo "$digest" > "$dist/memsync-$version.image-digest"

say "chart (image digest $digest)"
make --no-print-directory chart CHART_OUT="$dist" CHART_IMAGE=memsync CHART_IMAGE_DIGEST="$digest" >&2

(cd "$dist" && sha256sum -- memsync-* index.yaml > SHA256SUMS)
say "done: $dist"
(cd "$dist" && ls -1 -- memsync-* index.yaml SHA256SUMS)
