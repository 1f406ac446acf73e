#!/usr/bin/env bash
# Builds the control-plane binaries of the cluster test tier (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) from the pinned Go modules beside this script, into a
# cache outside the clone keyed by the pinned versions, and prints that directory. A second run with the
# same go.mod/go.sum/script finds the stamp and builds nothing.
#
#   build.sh           build if needed, print the binary directory
#   build.sh --check   print the binary directory if it is built and current, else exit 1 (never builds)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

source "$here/pins.sh"
cache_root="${MEMSYNC_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memsync/controlplane}"
out="$cache_root/kubernetes-$k8s_version-etcd-$etcd_version"
key="$(cat "$here/build.sh" "$here/pins.sh" "$here"/kubernetes/go.{mod,sum} "$here"/etcd/go.{mod,sum} | sha256sum | cut -d' ' -f1)"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

current() {
  [[ -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$key" ]] || return 1
  for b in "${binaries[@]}"; do [[ -x "$out/$b" ]] || return 1; done
}

if current; then echo "$out"; exit 0; fi
if [[ "${1:-}" == "--check" ]]; then
  echo "control-plane binaries for kubernetes $k8s_version / etcd $etcd_version are not built in $out" >&2
  exit 1
fi
command -v go >/dev/null || { echo "go is not installed: the control plane cannot be built" >&2; exit 1; }

mkdir -p "$cache_root"
work="$(mktemp -d "$cache_root/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "building etcd $etcd_version" >&2
(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$work/etcd" go.etcd.io/etcd/server/v3)
echo "building kubernetes $k8s_version (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)" >&2
(cd "$here/kubernetes" && go build -trimpath -ldflags "$k8s_ldflags" -o "$work/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
echo "$key" > "$work/.stamp"
rm -rf "$out.old"; [[ -d "$out" ]] && mv "$out" "$out.old"
mv "$work" "$out"; rm -rf "$out.old"
trap - EXIT
echo "built in $((SECONDS - start)) s" >&2
echo "$out"
