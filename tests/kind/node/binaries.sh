#!/usr/bin/env bash
# The binaries of the kind node image, each from a pinned Go module, into a cache outside the clone keyed by
# this script and every pin ($MEMSYNC_KIND_CACHE, default ~/.cache/memsync/kind/bin-<key>); prints that
# directory. The Kubernetes release and etcd are the control-plane tier's (tests/cluster/controlplane, whose
# build this runs for etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl); containerd,
# crictl, CoreDNS (kubeadm's plugins only), local-path-provisioner and pause come from modules/ beside this.
#
#   binaries.sh           build what is missing, print the directory
#   binaries.sh --check   print the directory if it is built and current, else exit 1 (never builds)
#   binaries.sh --key     print the key of the current pins (never builds)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0
source "$repo/tests/cluster/controlplane/pins.sh"
modules="$here/modules"
controlplane="$repo/tests/cluster/controlplane"

version_of() {  # the pinned version of module $1 in modules/$2
  local v; v="$(pinned "$1" "$modules/$2/go.mod")"
  [[ -n "$v" ]] || { echo "cannot read the version of $1 from $modules/$2/go.mod" >&2; exit 1; }
  echo "$v"
}
containerd_version="$(version_of github.com/containerd/containerd/v2 containerd)"
crictl_version="$(version_of sigs.k8s.io/cri-tools crictl)"
coredns_version="$(version_of github.com/coredns/coredns coredns)"
lpp_version="$(version_of github.com/rancher/local-path-provisioner local-path-provisioner)"

cache_root="${MEMSYNC_KIND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memsync/kind}"
key="$(cat "$here/binaries.sh" "$controlplane/pins.sh" "$controlplane/build.sh" \
  "$controlplane"/{kubernetes,etcd}/go.{mod,sum} "$modules"/*/go.mod "$modules"/*/go.sum "$modules"/*/*.go \
  2>/dev/null | sha256sum | cut -c1-12)"
out="$cache_root/bin-$key"
if [[ "${1:-}" == "--key" ]]; then echo "$key"; exit 0; fi
if [[ -f "$out/.stamp" ]]; then echo "$out"; exit 0; fi
if [[ "${1:-}" == "--check" ]]; then echo "the kind node's binaries are not built in $out" >&2; exit 1; fi
command -v go >/dev/null || { echo "go is not installed: the kind node's binaries cannot be built" >&2; exit 1; }

start=$SECONDS
step() { echo "[kind node binaries $((SECONDS - start)) s] $*" >&2; }
tools_of() {  # the packages a go.mod names with tool directives
  awk '$1 == "tool" && $2 != "(" {print $2} $1 == "tool" && $2 == "(" {t = 1; next} t && $1 == ")" {t = 0} t {print $1}' "$1"
}
mkdir -p "$cache_root"
work="$(mktemp -d "$cache_root/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
step "control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)"
cp_dir="$("$controlplane/build.sh")"
cp "$cp_dir"/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubectl} "$work/"
step "kubelet, kubeadm, kube-proxy $k8s_version"
(cd "$controlplane/kubernetes" && go build -trimpath -ldflags "$k8s_ldflags" -o "$work/" \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy)
step "containerd $containerd_version"
(cd "$modules/containerd" && go build -trimpath -tags "no_aufs no_zfs no_btrfs no_devmapper" \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
  -o "$work/" $(tools_of go.mod))
step "crictl $crictl_version"
(cd "$modules/crictl" && go build -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version" -o "$work/" $(tools_of go.mod))
step "local-path-provisioner $lpp_version"
(cd "$modules/local-path-provisioner" && go build -trimpath -ldflags "-s -w" -o "$work/" $(tools_of go.mod))
step "coredns $coredns_version (kubeadm's plugins)"
(cd "$modules/coredns" && go build -trimpath \
  -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$coredns_version" -o "$work/coredns" .)
step "pause"
(cd "$modules/pause" && go build -trimpath -ldflags "-s -w" -o "$work/pause" .)
echo "$key" > "$work/.stamp"
rm -rf "$out"; mv "$work" "$out"
trap - EXIT
for old in "$cache_root"/bin-*; do [[ "$old" == "$out" ]] || rm -rf "$old"; done
step "built in $out"
echo "$out"
