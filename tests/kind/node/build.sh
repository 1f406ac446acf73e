#!/usr/bin/env bash
# Builds the kind node image of the kind tier on a machine that can pull no image: every binary from a
# pinned Go module, every image on the Debian base that images/debian-base.sh makes. The Kubernetes release is
# the control-plane tier's (tests/cluster/controlplane: kubelet, kubeadm, kube-proxy, kubectl, the
# control-plane images, etcd); containerd, crictl, CoreDNS (kubeadm's plugin set only), local-path-provisioner
# and a pause binary come from the modules beside this script; kind's base files from the kind module that
# tests/tools/kind pins. Prints the image's name.
#
#   build.sh           build what is missing, print the node image
#   build.sh --check   print the node image if it is built and current, else exit 1 (never builds)
#
# The binaries come from binaries.sh beside this (cached outside the clone, keyed by every pin); the images
# live in docker, tagged with a key of this script, the base files and the binaries' key. What the host lacks is
# detected here: without CAP_SYS_RESOURCE in the bounding set, containerd inside the node is told to restrict
# oom_score_adj (it cannot set negative values). Intermediate images are removed once the node image exists.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0
source "$repo/tests/cluster/controlplane/pins.sh"

modules="$here/modules"
kind_version="$(pinned sigs.k8s.io/kind "$repo/tests/tools/kind/go.mod")"
coredns_version="$(pinned github.com/coredns/coredns "$modules/coredns/go.mod")"
[[ -n "$kind_version" && -n "$coredns_version" ]] || { echo "cannot read the kind or CoreDNS pin" >&2; exit 1; }

# The node's containerd must not ask for negative oom_score_adj values without CAP_SYS_RESOURCE.
bnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
restrict_oom=false; (( (16#$bnd >> 24 & 1) == 0 )) && restrict_oom=true

bin_key="$("$here/binaries.sh" --key)"
key="$( { cat "$here/build.sh" "$here/Dockerfile.base" "$here/10-bridge.conflist" "$repo/images/debian-base.sh" \
  "$repo/tests/tools/kind/go.mod"; echo "$bin_key restrict_oom=$restrict_oom"; } | sha256sum | cut -c1-12)"
node_image="memsync-kind-node:$k8s_version-$key"

if docker image inspect "$node_image" >/dev/null 2>&1; then echo "$node_image"; exit 0; fi
if [[ "${1:-}" == "--check" ]]; then echo "the kind node image $node_image is not built" >&2; exit 1; fi
command -v go >/dev/null || { echo "go is not installed: the kind node image cannot be built" >&2; exit 1; }
start=$SECONDS
step() { echo "[kind node $((SECONDS - start)) s] $*" >&2; }
quiet() {  # run a command; show its output only when it fails (docker build's chatter and warnings)
  local log; log="$(mktemp)"
  if "$@" >"$log" 2>&1; then rm -f "$log"; return 0; fi
  cat "$log" >&2; rm -f "$log"; return 1
}

# --- disk: a cold build peaks near 11 GB in docker's data root and needs about 3 GB of Go caches ----------
need_gb=15
docker_root="$(docker info -f '{{.DockerRootDir}}')"
cache_root="${MEMSYNC_KIND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memsync/kind}"
for dir in "$docker_root" "$(go env GOCACHE)" "$cache_root"; do
  mkdir -p "$dir"
  free_gb=$(( $(df --output=avail -k "$dir" | tail -1) / 1024 / 1024 ))
  if (( free_gb < need_gb )); then
    echo "the kind node image needs about $need_gb GB free; $dir has $free_gb GB (free some, or set" \
         "MEMSYNC_DOCKER_ROOT / MEMSYNC_KIND_CACHE / GOCACHE to a larger disk)" >&2
    exit 1
  fi
done

# --- binaries -----------------------------------------------------------------------------------------
step "binaries"
bin="$("$here/binaries.sh")"

# --- images -------------------------------------------------------------------------------------------
step "Debian base"
debian_image="$("$repo/images/debian-base.sh" debian)"
context="$(mktemp -d)"
node_container="memsync-kind-node-build-$key"
cleanup() { docker rm -f "$node_container" >/dev/null 2>&1 || true; rm -rf "$context"; }
trap cleanup EXIT

kind_dir="$(cd "$repo/tests/tools/kind" && go mod download -json sigs.k8s.io/kind | awk -F'"' '$2 == "Dir" {print $4}')"
[[ -d "$kind_dir/images/base/files" ]] || { echo "kind's base files are not in $kind_dir" >&2; exit 1; }
storage_go="$kind_dir/pkg/build/nodeimage/const_storage.go"
sandbox_image="$(awk -F'"' '/sandbox_image *=/ {print $2}' "$kind_dir/images/base/files/etc/containerd/config.toml")"
lpp_image="$(awk -F'"' '/^const storageProvisionerImage/ {print $2}' "$storage_go")"
helper_image="$(awk -F'"' '/^const storageHelperImage/ {print $2}' "$storage_go")"
kubeadm_pause="registry.k8s.io/pause:$(awk -F'"' '/^\tPauseVersion *=/ {print $2}' \
  "$(cd "$repo/tests/cluster/controlplane/kubernetes" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/cmd/kubeadm/app/constants/constants.go")"
etcd_tag="${etcd_version#v}-0"

# image NAME FROM [ENTRYPOINT-JSON] [BINARY...]: a small image with binaries in /usr/local/bin
images=()
image() {
  local name="$1" from="$2" entrypoint="$3"; shift 3
  local dir="$context/$(echo "$name" | tr '/:' '__')"; mkdir -p "$dir"
  { echo "FROM $from"
    for b in "$@"; do cp "$bin/$b" "$dir/"; echo "COPY $b /usr/local/bin/$b"; done
    [[ -n "$entrypoint" ]] && echo "ENTRYPOINT $entrypoint"
    echo "LABEL org.memsync.kind-key=$key"; } > "$dir/Dockerfile"
  quiet docker build -q -t "$name" "$dir"
  images+=("$name")
}
step "component images"
for component in kube-apiserver kube-controller-manager kube-scheduler; do
  image "registry.k8s.io/$component:$k8s_version" "$debian_image" "" "$component"
done
# kube-proxy programs iptables; build it on a layer with Debian's iptables and conntrack
proxy_base="memsync-kind-proxy-base:$key"
quiet docker build -q --network=host -t "$proxy_base" - <<DOCKERFILE
FROM $debian_image
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables conntrack \
 && rm -rf /var/lib/apt/lists/*
DOCKERFILE
image "registry.k8s.io/kube-proxy:$k8s_version" "$proxy_base" "" kube-proxy
image "registry.k8s.io/etcd:$etcd_tag" "$debian_image" "" etcd
image "registry.k8s.io/coredns/coredns:$coredns_version" "$debian_image" '["/usr/local/bin/coredns"]' coredns
image "$sandbox_image" "$debian_image" '["/usr/local/bin/pause"]' pause
[[ "$kubeadm_pause" != "$sandbox_image" ]] && docker tag "$sandbox_image" "$kubeadm_pause" && images+=("$kubeadm_pause")
image "$lpp_image" "$debian_image" "" local-path-provisioner
# the helper Pods of local-path-provisioner run `sh` scripts: the Debian base as it is
docker tag "$debian_image" "$helper_image"; images+=("$helper_image")

step "node base (kind $kind_version's base files)"
rootfs="$context/base/rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/cni/net.d" "$rootfs/LICENSES"
cp -r "$kind_dir/images/base/files/etc" "$kind_dir/images/base/files/kind" "$rootfs/"
cp "$kind_dir"/images/base/files/usr/local/bin/* "$bin"/{containerd,ctr,containerd-shim-runc-v2,crictl} \
  "$rootfs/usr/local/bin/"
cp "$kind_dir/images/base/files/LICENSES/README.txt" "$rootfs/LICENSES/"
cp "$here/10-bridge.conflist" "$rootfs/etc/cni/net.d/"
chmod -R u+w,go-w "$rootfs"; find "$rootfs" -type d -exec chmod 0755 {} +
find "$rootfs" -type f -exec chmod 0644 {} +
chmod 0755 "$rootfs"/usr/local/bin/* "$rootfs"/kind/bin/*
if [[ "$restrict_oom" == true ]]; then
  sed -i 's/^\( *restrict_oom_score_adj\) = false/\1 = true/' "$rootfs/etc/containerd/config.toml"
  grep -q 'restrict_oom_score_adj = true' "$rootfs/etc/containerd/config.toml"
fi
cp "$here/Dockerfile.base" "$context/base/Dockerfile"
base_image="memsync-kind-base:$key"
quiet docker build -q --network=host --build-arg "DEBIAN_IMAGE=$debian_image" -t "$base_image" "$context/base"

step "node image: Kubernetes binaries and ${#images[@]} images imported into the node's containerd"
sed -n '/^const defaultStorageManifest = `/,/^`/p' "$storage_go" | sed '1s/^const defaultStorageManifest = `//; $d' \
  | sed "s#\` + storageProvisionerImage + \`#$lpp_image#; s#\` + storageHelperImage + \`#$helper_image#" \
  > "$context/default-storage.yaml"
grep -q "$lpp_image" "$context/default-storage.yaml"
quiet docker run -d --name "$node_container" --privileged --entrypoint sleep "$base_image" infinity
for b in kubelet kubeadm kubectl; do docker cp "$bin/$b" "$node_container:/usr/bin/$b"; done
docker exec "$node_container" mkdir -p /kind/manifests
docker cp "$context/default-storage.yaml" "$node_container:/kind/manifests/default-storage.yaml"
echo "$k8s_version" | docker exec -i "$node_container" sh -c 'cat > /kind/version'
docker exec -d "$node_container" sh -c 'containerd >/var/log/containerd-build.log 2>&1'
for _ in $(seq 60); do docker exec "$node_container" ctr version >/dev/null 2>&1 && break; sleep 0.5; done
docker save "${images[@]}" | quiet docker exec -i "$node_container" \
  ctr -n k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests -
imported="$(docker exec "$node_container" ctr -n k8s.io images ls -q 2>/dev/null)"
for name in "${images[@]}"; do
  grep -qx "$(echo "$name" | sed 's#^\([^/]*\)$#docker.io/library/\1#')" <<<"$imported" \
    || { echo "image $name is not in the node's containerd" >&2; exit 1; }
done
docker exec "$node_container" pkill containerd
for _ in $(seq 60); do docker exec "$node_container" pgrep -x containerd >/dev/null || break; sleep 0.5; done
docker exec "$node_container" rm -f /var/log/containerd-build.log
docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
  "$node_container" "$node_image" >/dev/null

step "pruning what the cache does not keep"
cleanup
docker rmi "${images[@]}" "$proxy_base" "$base_image" >/dev/null 2>&1 || true
for old in $(docker images --format '{{.Repository}}:{{.Tag}}' memsync-kind-node); do
  [[ "$old" == "$node_image" ]] || docker rmi "$old" >/dev/null 2>&1 || true
done
docker image prune -f >/dev/null
step "built $node_image"
echo "$node_image"
