#!/usr/bin/env bash
# The kind tier of `make test`, on a machine with no container registry: everything is built here.
#
#   tests/kind/tier.sh COMMAND...      e.g. tests/kind/tier.sh .venv/bin/pytest -m kind tests/kind
#   tests/kind/tier.sh --prepare       steps 1-4 only; prints an `export` line (KIND_CONFIG, PATH) for a shell
#                                      (eval "$(tests/kind/tier.sh --prepare)"), and leaves dockerd running
#
# 1. docker: the daemon that answers, or one started by host/dockerd.sh (stopped again at the end);
# 2. kind from its pinned Go module (tests/tools/kind), the node image from pinned sources (node/build.sh);
# 3. the memsync image: on the published Python base when it can be pulled, else on the Debian base made by
#    images/debian-base.sh; the host's CA bundle is trusted during the build (a TLS-intercepting proxy), never
#    baked in. The tag is the hash of what goes into the image, so a reused cluster never runs stale code;
# 4. a kind configuration for this host: the local node image, the bridge CNI baked into it (kind's own
#    kindnetd image cannot be pulled), cgroup v1 allowed when the host has no unified hierarchy, the
#    etcd image tag of the control-plane tier's pinned etcd, and a tainted worker node for the node-loss and
#    drain scenarios (tests/kind/nodes.py);
# 5. COMMAND runs with KIND_CLUSTER, KIND_CONFIG, MEMSYNC_IMAGE, MEMSYNC_SKIP_BUILD=1 and
#    MEMSYNC_KIND_REQUIRED=1 (a kind test that would skip fails instead); the conftest creates the cluster,
#    loads the image and deploys the operator.
#
# When docker or go is not installed, COMMAND runs as it is and the kind tests skip, each with the reason.
# KEEP_CLUSTER=1 keeps the cluster (and a dockerd this script started) for another run.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
(( $# > 0 )) || { echo "usage: $0 COMMAND... | --prepare" >&2; exit 2; }
prepare_only=0; [[ "$1" == --prepare ]] && prepare_only=1

missing=()
for tool in docker dockerd go; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
  echo "kind tier: ${missing[*]} not installed; the kind tests skip (.ci/run installs docker.io and debootstrap)" >&2
  ((prepare_only)) && exit 1
  exec "$@"
fi

start=$SECONDS
say() { echo "[kind tier $((SECONDS - start)) s] $*" >&2; }
started_docker=0
docker info >/dev/null 2>&1 || started_docker=1
tests/kind/host/dockerd.sh start
finish() {
  if [[ "$prepare_only" == 0 && "${KEEP_CLUSTER:-}" != 1 && "$started_docker" == 1 ]]; then
    "$kind" delete cluster --name "$KIND_CLUSTER" >/dev/null 2>&1 || true
    tests/kind/host/dockerd.sh stop
  fi
}
kind=kind
trap finish EXIT

say "kind"
kind="$(nice -n 10 tests/tools/build.sh kind)"
say "node image"
node_image="$(nice -n 10 tests/kind/node/build.sh)"

say "memsync image"
published="$(awk -F= '/^ARG PYTHON_IMAGE=/ {print $2; exit}' Dockerfile)"
base_args=()
if ! docker image inspect "$published" >/dev/null 2>&1 && ! docker pull -q "$published" >/dev/null 2>&1; then
  echo "kind tier: the published base $published cannot be pulled; building on the Debian base made here" >&2
  base_args=(BASE=debootstrap)
fi
ca="${MEMSYNC_IMAGE_CA:-/etc/ssl/certs/ca-certificates.crt}"
[[ -f "$ca" ]] && base_args+=("EXTRA_CA_BUNDLE=$ca")
tag="kind-$( { git ls-files -s pyproject.toml README.md LICENSE constraints.txt Dockerfile operator; \
  git diff HEAD -- pyproject.toml README.md LICENSE constraints.txt Dockerfile operator; \
  git ls-files --others --exclude-standard operator | xargs -r cat; } | sha256sum | cut -c1-12)"
if ! docker image inspect "memsync:$tag" >/dev/null 2>&1; then
  make --no-print-directory image IMAGE=memsync TAG="$tag" "${base_args[@]}" >&2
fi
for old in $(docker images --format '{{.Repository}}:{{.Tag}}' memsync | grep '^memsync:kind-'); do
  [[ "$old" == "memsync:$tag" ]] || docker rmi "$old" >/dev/null 2>&1 || true  # earlier code's images
done

export KIND_CLUSTER="${KIND_CLUSTER:-memsync-ci}"
export KIND_CONFIG="$repo/.memsync/kind/config.yaml"
mkdir -p "$(dirname "$KIND_CONFIG")"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' tests/cluster/controlplane/etcd/go.mod)"
{
  echo "# Written by tests/kind/tier.sh for this host; users keep kind-config.yaml at the top of the repository."
  echo "kind: Cluster"
  echo "apiVersion: kind.x-k8s.io/v1alpha4"
  echo "networking:"
  echo "  disableDefaultCNI: true   # the node image carries a bridge CNI configuration"
  echo "nodes:"
  echo "  - role: control-plane"
  echo "    image: $node_image"
  # The node-loss and drain scenarios' worker (tests/kind/nodes.py): its taint keeps every other Pod off it.
  echo "  - role: worker"
  echo "    image: $node_image"
  echo "    kubeadmConfigPatches:"
  echo "      - |"
  echo "        kind: JoinConfiguration"
  echo "        nodeRegistration:"
  echo "          taints: [{key: memsync.dev/scenarios, value: worker, effect: NoSchedule}]"
  echo "kubeadmConfigPatches:"
  echo "  - |"
  echo "    kind: ClusterConfiguration"
  echo "    etcd:"
  echo "      local:"
  echo "        imageTag: ${etcd_version#v}-0"
  if [[ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]]; then
    echo "  - |"
    echo "    kind: KubeletConfiguration"
    echo "    failCgroupV1: false   # this host mounts cgroup v1"
  fi
} > "$KIND_CONFIG"

# kubectl of the pinned release (the control plane's build, which the node image's build made current)
kubectl_dir="$(tests/cluster/controlplane/build.sh --check)"
if ((prepare_only)); then
  echo "export KIND_CONFIG='$KIND_CONFIG' PATH='$(dirname "$kind"):$kubectl_dir:'\"\$PATH\""
  echo "# the image is memsync:$tag; make kind-up kind-load deploy BASE=debootstrap builds and loads its own" >&2
  exit 0
fi
say "running: $*"
status=0
PATH="$(dirname "$kind"):$kubectl_dir:$PATH" MEMSYNC_IMAGE="memsync:$tag" MEMSYNC_SKIP_BUILD=1 MEMSYNC_KIND_REQUIRED=1 "$@" || status=$?
say "done (exit $status)"
exit "$status"
