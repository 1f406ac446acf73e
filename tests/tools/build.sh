#!/usr/bin/env bash
# Builds one test tool (helm, promtool, kind or kwok) from the pinned Go module beside this script (tests/tools/<name>/
# go.mod names it with a `tool` directive) into a cache outside the clone keyed by the pinned version, and
# prints the binary's path. A second run with the same go.mod/go.sum/script finds the stamp and builds
# nothing; concurrent runs (pytest workers) wait for each other on a lock in the cache.
#
#   build.sh NAME           build if needed, print the binary
#   build.sh NAME --check   print the binary if it is built and current, else exit 1 (never builds)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
name="${1:?usage: build.sh helm|promtool|kind|kwok [--check]}"
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

case "$name" in
  helm)
    module=helm.sh/helm/v4 tags=""
    ldflags() { echo "-s -w -X helm.sh/helm/v4/internal/version.version=$1 -X helm.sh/helm/v4/internal/version.gitTreeState=clean"; } ;;
  promtool)
    # remove_all_sd leaves out every service-discovery plugin (and the cloud SDKs they pull in): rule checks
    # and rule unit tests need none, and the build takes a fraction of the time.
    module=github.com/prometheus/prometheus tags=remove_all_sd
    # Prometheus 3.x publishes its Go module as v0.3XX.Y for release 3.XX.Y.
    ldflags() {
      local v="${1#v0.}"; v="3.${v#3}"
      echo "-s -w -X github.com/prometheus/common/version.Version=$v -X github.com/prometheus/common/version.Branch=release"
    } ;;
  kind)
    module=sigs.k8s.io/kind tags=""
    ldflags() { echo "-s -w"; } ;;
  kwok)
    # The simulated nodes of the fleet benchmark (bench/operator_fleet.py): Pods reported Running without a
    # kubelet. Its version string is set in its own source, so no -X is needed.
    module=sigs.k8s.io/kwok tags=""
    ldflags() { echo "-s -w"; } ;;
  *) echo "unknown tool: $name (helm, promtool, kind or kwok)" >&2; exit 2 ;;
esac
mod="$here/$name/go.mod"
version="$(awk -v m="$module" '$1 == m && $2 ~ /^v[0-9]/ {print $2; exit}' "$mod")"
package="$(awk '$1 == "tool" {print $2; exit}' "$mod")"
[[ -n "$version" && -n "$package" ]] || { echo "cannot read the pinned $module version or tool from $mod" >&2; exit 1; }
cache_root="${MEMSYNC_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memsync/tools}"
out="$cache_root/$name-$version"
key="$(cat "$here/build.sh" "$here/$name"/go.{mod,sum} | sha256sum | cut -d' ' -f1)"

current() { [[ -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$key" && -x "$out/$name" ]]; }

if current; then echo "$out/$name"; exit 0; fi
if [[ "${2:-}" == "--check" ]]; then
  echo "$name $version is not built in $out" >&2
  exit 1
fi
command -v go >/dev/null || { echo "go is not installed: $name cannot be built" >&2; exit 1; }

mkdir -p "$cache_root"
exec 9>"$cache_root/.$name.lock"
flock 9
if current; then echo "$out/$name"; exit 0; fi  # another run built it while we waited
work="$(mktemp -d "$cache_root/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "building $name $version" >&2
(cd "$here/$name" && go build -trimpath -tags "$tags" -ldflags "$(ldflags "$version")" -o "$work/$name" "$package")
echo "$key" > "$work/.stamp"
rm -rf "$out.old"; [[ -d "$out" ]] && mv "$out" "$out.old"
mv "$work" "$out"; rm -rf "$out.old"
trap - EXIT
echo "built $name in $((SECONDS - start)) s" >&2
echo "$out/$name"
