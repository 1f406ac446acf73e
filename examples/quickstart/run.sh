#!/bin/sh
# The quickstart: a store, a session's Secret and a SessionMemory; waits until the sandbox's file is in the
# store. Needs a cluster with memsync deployed (README "Quickstart") and a store server reachable here.
#
#   STORE_URL        the store server as this machine reaches it   (default http://127.0.0.1:8700)
#   MEMSYNC_ADMIN_KEY or ADMIN_KEY_FILE   its admin key             (default: the kind overlay's dev key)
#   KUBECTL          the kubectl to use                             (default kubectl)
#   TIMEOUT          seconds to wait for the file                  (default 180)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
KUBECTL=${KUBECTL:-kubectl}
TIMEOUT=${TIMEOUT:-180}
export MEMSYNC_STORE_URL=${STORE_URL:-http://127.0.0.1:8700}
if [ -n "${ADMIN_KEY_FILE:-}" ]; then
    MEMSYNC_ADMIN_KEY=$(cat "$ADMIN_KEY_FILE")
fi
export MEMSYNC_ADMIN_KEY=${MEMSYNC_ADMIN_KEY:-kind-dev-admin-key-not-a-secret-local-only}
memsync=memsync
if [ -x "$repo/.venv/bin/memsync" ]; then memsync="$repo/.venv/bin/memsync"; fi
ns=memsync-quickstart

echo "== the store \"Quickstart Notes\" on $MEMSYNC_STORE_URL"
store_id=$("$memsync" store create "Quickstart Notes" --description "written by the memsync quickstart")
session_id="sesn_quickstart$(date -u +%Y%m%d%H%M%S)"

echo "== namespace $ns (restricted Pod Security) and the session's work-item Secret"
"$KUBECTL" create namespace "$ns" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
"$KUBECTL" label --overwrite namespace "$ns" pod-security.kubernetes.io/enforce=restricted >/dev/null
"$KUBECTL" -n "$ns" delete smem quickstart --ignore-not-found --wait=true >/dev/null
secret=$("$memsync" store token --session "$session_id" --store "$store_id")
"$KUBECTL" -n "$ns" create secret generic quickstart-work --from-literal=secret="$secret" \
    --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null

echo "== SessionMemory quickstart (session $session_id, store $store_id)"
sed -e "s/@SESSION_ID@/$session_id/" -e "s/@STORE_ID@/$store_id/" "$here/sessionmemory.yaml" \
    | "$KUBECTL" apply -f -

echo "== waiting up to ${TIMEOUT}s for /hello.md in the store"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
deadline=$(( $(date +%s) + TIMEOUT ))
while :; do
    rm -rf "$out/export"
    if "$memsync" store export "$store_id" "$out/export" >/dev/null 2>&1 && [ -f "$out/export/hello.md" ]; then
        break
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "the file did not reach the store in ${TIMEOUT}s; the session's state:" >&2
        "$KUBECTL" -n "$ns" get smem quickstart -o wide >&2 || true
        "$KUBECTL" -n "$ns" describe smem quickstart >&2 || true
        exit 1
    fi
    sleep 2
done
echo "== the store holds /hello.md:"
cat "$out/export/hello.md"
"$KUBECTL" -n "$ns" get smem quickstart
echo "store_id=$store_id session_id=$session_id"
