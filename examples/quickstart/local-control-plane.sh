#!/bin/sh
# The quickstart on the local control plane (`make cluster-up` first; Linux, root): deploys memsync with the
# kind overlay, starts a store server on the cluster's bridge address (where the sandbox Pods reach it; this
# control plane has no volume provisioner for the overlay's in-cluster store server), then runs run.sh.
# The store server keeps running, writing to .memsync/quickstart/, until `make cluster-down`, which runs
#   examples/quickstart/local-control-plane.sh stop
# (it stops that store server, only if it is still the one this script started).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
state="$repo/.memsync/quickstart"

if [ "${1:-}" = stop ]; then
    pid=$(cat "$state/store.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "memsync store serve"; then
        kill "$pid"
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        echo "stopped the quickstart's store server (pid $pid)"
    fi
    rm -f "$state/store.pid"
    exit 0
fi
info="$repo/.memsync/cluster/cluster.json"
if [ ! -f "$info" ]; then
    echo "no local control plane is running: run \`make cluster-up\` first" >&2
    exit 1
fi
field() { "$repo/.venv/bin/python" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$info" "$1"; }
export KUBECONFIG=$(field kubeconfig)
export KUBECTL=$(field kubectl)
gateway=$(field gateway)
mkdir -p "$state"

echo "== memsync: CRDs and the operator (manifests/overlays/kind)"
"$KUBECTL" apply --server-side -k "$repo/manifests/overlays/kind" >/dev/null
"$KUBECTL" wait --for=condition=Established crd/sessionmemories.agents.memsync.dev --timeout=60s >/dev/null
"$KUBECTL" -n memsync-system rollout status deployment/memsync-operator --timeout=180s

port=8700
export STORE_URL="http://$gateway:$port"
if ! "$repo/.venv/bin/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/healthz', timeout=2)" "$STORE_URL" 2>/dev/null; then
    echo "== a store server on $STORE_URL (log: $state/store.log)"
    nohup "$repo/.venv/bin/memsync" store serve --host "$gateway" --port "$port" --db "$state/store.db" \
        --public-url "$STORE_URL" >"$state/store.log" 2>&1 &
    echo $! >"$state/store.pid"
    for _ in $(seq 50); do
        "$repo/.venv/bin/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/healthz', timeout=2)" "$STORE_URL" 2>/dev/null && break
        sleep 0.2
    done
fi
export ADMIN_KEY_FILE="$state/store.db.admin-key"
exec "$here/run.sh"
