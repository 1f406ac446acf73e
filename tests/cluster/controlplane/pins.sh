# Sourced by the build scripts of the cluster and kind tiers: the pinned Kubernetes and etcd releases of the
# Go modules beside this file, and the version stamp every Kubernetes binary is linked with.
# Sets: k8s_version, etcd_version, k8s_ldflags.
pins_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

pinned() {  # the version go.mod $2 requires of module $1
  awk -v m="$1" '{for (i = 1; i < NF; i++) if ($i == m && $(i + 1) ~ /^v[0-9]/) {print $(i + 1); exit}}' "$2"
}
k8s_version="$(pinned k8s.io/kubernetes "$pins_dir/kubernetes/go.mod")"
etcd_version="$(pinned go.etcd.io/etcd/server/v3 "$pins_dir/etcd/go.mod")"
[[ -n "$k8s_version" && -n "$etcd_version" ]] || { echo "cannot read the pinned versions in $pins_dir" >&2; exit 1; }

k8s_ldflags="-s -w"
_minor="${k8s_version#v1.}"; _minor="${_minor%%.*}"
for _pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $_pkg.gitVersion=$k8s_version -X $_pkg.gitMajor=1 -X $_pkg.gitMinor=$_minor"
  k8s_ldflags+=" -X $_pkg.gitTreeState=clean -X $_pkg.buildDate=1970-01-01T00:00:00Z"
done
unset _minor _pkg
