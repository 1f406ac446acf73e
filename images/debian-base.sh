#!/usr/bin/env bash
# Makes the base images of memsync's image builds where no registry can be reached (no published base can be
# pulled): a Debian 12 (bookworm) root filesystem from debootstrap, imported as memsync-base/debian:bookworm,
# and Debian 12's Python 3.11 on it as memsync-base/python:3.11-bookworm. Root, docker and debootstrap needed.
#
#   images/debian-base.sh [debian|python]   build what is missing or out of date; print the image's name
#
# An image is current when its label org.memsync.base-key matches this script's hash and the mirror; set
# MEMSYNC_BASE_REBUILD=1 to build again anyway (for example to take Debian's latest security fixes).
# DEBIAN_MIRROR (default: the first Debian URI in /etc/apt/sources*, else http://deb.debian.org/debian).
set -euo pipefail
want="${1:-python}"
[[ "$want" == debian || "$want" == python ]] || { echo "usage: $0 [debian|python]" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
suite=bookworm
debian_image="memsync-base/debian:$suite"
python_image="memsync-base/python:3.11-$suite"

mirror="${DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  mirror="$(grep -rhoE '(URIs:|^deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ \
    2>/dev/null | awk '{print $2; exit}' || true)"
  mirror="${mirror:-http://deb.debian.org/debian}"
fi
key="$( { cat "$0"; echo "$mirror"; } | sha256sum | cut -c1-16)"

current() {  # image $1 carries key $2
  [[ "${MEMSYNC_BASE_REBUILD:-}" != 1 ]] && \
    [[ "$(docker image inspect -f '{{index .Config.Labels "org.memsync.base-key"}}' "$1" 2>/dev/null)" == "$2" ]]
}

build_debian() {
  current "$debian_image" "$key" && return 0
  command -v debootstrap >/dev/null || { echo "debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
  [[ $EUID -eq 0 ]] || { echo "debootstrap needs root" >&2; exit 1; }
  local rootfs; rootfs="$(mktemp -d /var/tmp/memsync-rootfs.XXXXXX)"
  trap "rm -rf '$rootfs'" EXIT
  echo "debootstrap $suite from $mirror" >&2
  debootstrap --variant=minbase --include=ca-certificates "$suite" "$rootfs" "$mirror" >&2
  local security="${mirror%/debian*}/debian-security"
  cat > "$rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
SOURCES
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import \
    --change "LABEL org.memsync.base-key=$key" --change 'CMD ["/bin/bash"]' - "$debian_image" >/dev/null
  rm -rf "$rootfs"; trap - EXIT
}

build_python() {
  # rebuilt whenever the Debian base under it is
  local python_key; python_key="$key-$(docker image inspect -f '{{.Id}}' "$debian_image" | cut -c8-19)"
  current "$python_image" "$python_key" && return 0
  local context; context="$(mktemp -d)"
  trap "rm -rf '$context'" EXIT
  # --network=host: the docker daemon of the test tooling runs without NAT (it never touches iptables).
  docker build --network=host -q -t "$python_image" -f - "$context" >/dev/null <<DOCKERFILE
FROM $debian_image
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv python-is-python3 \\
 && rm -rf /var/lib/apt/lists/*
LABEL org.memsync.base-key=$python_key
DOCKERFILE
}

build_debian
if [[ "$want" == python ]]; then build_python; echo "$python_image"; else echo "$debian_image"; fi
