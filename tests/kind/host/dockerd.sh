#!/usr/bin/env bash
# The docker daemon of the kind tier, when none runs: started as root with its data outside the clone, and
# stopped again by the tooling that started it.
#
#   dockerd.sh start   if `docker info` answers, do nothing; else start dockerd and wait until it answers
#   dockerd.sh stop    stop the dockerd that `start` started (a daemon it did not start is left alone)
#
# The daemon never touches the host's firewall or forwarding (--iptables=false --ip6tables=false
# --ip-forward=false): other tiers on the same machine rely on the iptables FORWARD policy and ip_forward
# as they are. Without NAT, containers reach no outside address; `docker build` uses --network=host.
# When the capability bounding set lacks CAP_SYS_RESOURCE (some sandboxed hosts), `docker run --privileged`
# cannot apply the capabilities it asks for, so the default runtime becomes runc-wrapper beside this script,
# which removes that capability from each container's spec and then runs runc.
#
# MEMSYNC_DOCKER_ROOT  the data root (default: $XDG_CACHE_HOME/memsync/docker, i.e. ~/.cache/memsync/docker)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data_root="${MEMSYNC_DOCKER_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/memsync/docker}"
exec_root=/run/memsync-docker
pidfile="$exec_root/dockerd.pid"
log="$data_root.log"

answers() { docker info >/dev/null 2>&1; }

# Bit 24 of the bounding set is CAP_SYS_RESOURCE.
lacks_sys_resource() {
  local bnd; bnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
  (( (16#$bnd >> 24 & 1) == 0 ))
}

start() {
  if answers; then echo "docker: using the daemon that already answers" >&2; return 0; fi
  [[ $EUID -eq 0 ]] || { echo "docker does not answer and starting dockerd needs root" >&2; exit 1; }
  command -v dockerd >/dev/null || { echo "dockerd is not installed (apt-get install docker.io)" >&2; exit 1; }
  mkdir -p "$data_root" "$exec_root"
  local args=(--data-root "$data_root" --exec-root "$exec_root" --pidfile "$pidfile"
    --iptables=false --ip6tables=false --ip-forward=false --storage-driver overlay2)
  if lacks_sys_resource; then
    echo "docker: CAP_SYS_RESOURCE is not in the bounding set; containers run through runc-wrapper" >&2
    args+=(--add-runtime "memsync-runc=$here/runc-wrapper" --default-runtime memsync-runc)
  fi
  setsid dockerd "${args[@]}" >>"$log" 2>&1 < /dev/null &
  local deadline=$((SECONDS + 60))
  until answers; do
    if (( SECONDS > deadline )) || ! kill -0 $! 2>/dev/null; then
      echo "dockerd did not answer within 60 s; the end of $log:" >&2; tail -20 "$log" >&2; exit 1
    fi
    sleep 0.5
  done
  echo "docker: started dockerd (pid $(cat "$pidfile"), data in $data_root, log $log)" >&2
}

stop() {
  [[ -f "$pidfile" ]] || return 0
  local pid; pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && { echo "dockerd $pid did not stop in 30 s; killing it" >&2; kill -9 "$pid"; }
  fi
  rm -f "$pidfile"
  echo "docker: stopped dockerd" >&2
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
