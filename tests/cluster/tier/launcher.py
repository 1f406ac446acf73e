"""Turns the current process into a container, then execs its command. Run by the process kubelet as
``nsenter --net=<pod netns> unshare --mount --uts --propagation private python -I launcher.py <spec.json>``
(so the process ID is the container's from the first exec to the last), it:

1. builds the container's root: a copy-on-write overlay of this machine's ``/`` whose writable layer is a
   private tmpfs (nothing the container writes reaches the host), with a fresh ``/proc``, a read-only
   ``/sys``, a minimal ``/dev``, an empty ``/run`` and the Pod's ``/etc/hosts``;
2. bind-mounts each volume at its ``mountPath`` (read-only when asked) and the termination-message file;
3. makes the root read-only for ``readOnlyRootFilesystem``;
4. sets the hostname, chroots, drops to the container's uid, gid and supplementary groups, and execs.

Standard library only: it runs before any project code could be imported, under the kubelet's interpreter.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"container setup: mount {' '.join(args)}: {proc.stderr.strip()}")


def inside(root: Path, path: str) -> Path:
    """``path`` of the container as a path on this machine: symlinks resolve inside ``root`` (as after the
    chroot: the image's ``/var/run -> /run`` must land on the container's ``/run``, not this machine's)."""
    current = root
    parts = [p for p in path.split("/") if p and p != "."]
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = current.parent if current != root else root
            continue
        candidate = current / part
        if candidate.is_symlink():
            hops += 1
            if hops > 40:
                raise SystemExit(f"container setup: too many symlinks in {path}")
            target = os.readlink(candidate)
            parts = [p for p in target.split("/") if p and p != "."] + parts
            current = root if target.startswith("/") else current
            continue
        current = candidate
    return current


def build_root(scratch: Path) -> Path:
    mount("-t", "tmpfs", "-o", "mode=0755", "container-layer", str(scratch))
    for d in ("upper", "work", "root"):
        (scratch / d).mkdir()
    root = scratch / "root"
    mount(
        "-t",
        "overlay",
        "container-root",
        "-o",
        f"lowerdir=/,upperdir={scratch / 'upper'},workdir={scratch / 'work'}",
        str(root),
    )
    mount("-t", "proc", "proc", str(root / "proc"))
    mount("--rbind", "/sys", str(root / "sys"))
    mount("-o", "remount,bind,ro", str(root / "sys"))
    mount("-t", "tmpfs", "-o", "mode=0755", "run", str(root / "run"))
    dev = root / "dev"
    mount("-t", "tmpfs", "-o", "mode=0755,nosuid", "dev", str(dev))
    for name in DEVICES:
        if Path("/dev", name).exists():
            (dev / name).touch()
            mount("--bind", f"/dev/{name}", str(dev / name))
    (dev / "shm").mkdir()
    mount("-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "shm", str(dev / "shm"))
    for link, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
    ):
        (dev / link).symlink_to(target)
    (dev / "stderr").symlink_to("/proc/self/fd/2")
    # The host's /root is private to root; the container's view of it is traversable so that images
    # mapped onto a Python installed there run as any user (a change to the container's layer only).
    (root / "root").chmod(0o711)
    return root


def bind(root: Path, source: str, target: str, read_only: bool) -> None:
    where = inside(root, target)
    if Path(source).is_dir():
        where.mkdir(parents=True, exist_ok=True)
    else:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.touch(exist_ok=True)
    mount("--bind", source, str(where))
    if read_only:
        mount("-o", "remount,bind,ro", str(where))


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    root = build_root(Path(spec["scratch"]))
    inside(root, "/etc/hosts").write_text(spec["hosts"])
    inside(root, "/etc/hostname").write_text(spec["hostname"] + "\n")
    with inside(root, "/etc/passwd").open("a") as passwd, inside(root, "/etc/group").open("a") as group:
        for name, uid, gid in spec["users"]:
            passwd.write(f"{name}:x:{uid}:{gid}::/nonexistent:/usr/sbin/nologin\n")
            group.write(f"{name}:x:{gid}:\n")
    for m in spec["mounts"]:
        bind(root, m["source"], m["target"], m["readOnly"])
    if spec["readOnlyRoot"]:
        mount("-o", "remount,bind,ro", str(root))
    socket.sethostname(spec["hostname"])
    os.chroot(root)
    os.chdir(spec["workingDir"] or "/")
    os.setgroups(spec["groups"])
    os.setgid(spec["gid"])
    os.setuid(spec["uid"])
    os.umask(0o022)
    env = spec["env"]
    argv = spec["argv"]
    try:
        os.execvpe(argv[0], argv, env)  # noqa: S606 (the container's own command)
    except OSError as exc:
        print(f"exec {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        raise SystemExit(127) from None


if __name__ == "__main__":
    main()
