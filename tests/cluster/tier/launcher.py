"""Turns the current process into a container, then execs its command. Run by the process kubelet as
``nsenter --net=<pod netns> unshare --mount --uts --propagation private python -I launcher.py <spec.json>``
(so the process ID is the container's from the first exec to the last), it:

1. builds the container's root: a copy-on-write overlay of this machine's ``/`` whose writable layer is a
   private tmpfs (nothing the container writes reaches the host), with a fresh ``/proc``, a read-only
   ``/sys``, a minimal ``/dev``, an empty ``/run`` and the Pod's ``/etc/hosts``; the folders above the
   image's interpreter are searchable in that layer;
2. bind-mounts the image's files (the project's environment at ``/opt/memsync``), each volume at its
   ``mountPath`` (read-only when asked) and the termination-message file;
3. makes the root read-only for ``readOnlyRootFilesystem``;
4. sets the hostname, chroots, drops to the container's uid, gid and supplementary groups, and execs.

Standard library only: it runs before any project code could be imported, under the kubelet's interpreter.
:class:`Spec` is what it reads, and :func:`command` how to run it: the process kubelet uses both, and so does
any test that runs a process as a container would.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


@dataclass
class Spec:
    """One container: where its writable layer lives, what it mounts, who it runs as and what it runs."""

    scratch: str
    argv: list[str]
    env: dict[str, str]
    uid: int
    gid: int
    groups: list[int] = field(default_factory=list)
    #: ``{"source", "target", "readOnly"}`` each, mounted in this order
    mounts: list[dict[str, object]] = field(default_factory=list)
    hosts: str = "127.0.0.1\tlocalhost\n::1\tlocalhost\n"
    hostname: str = "container"
    read_only_root: bool = False
    working_dir: str = ""
    #: (name, uid, gid) added to the image's ``/etc/passwd`` and ``/etc/group``
    users: list[list[object]] = field(default_factory=list)
    #: paths whose folders (and their parents) the container's user must be able to search
    traversable: list[str] = field(default_factory=list)

    def write(self, path: Path) -> None:
        """Write the spec where only root reads it (it holds the container's environment)."""
        path.touch(mode=0o600)
        path.write_text(json.dumps(asdict(self)))


def command(spec_file: Path, netns: str | None = None) -> list[str]:
    """The command that runs the container of ``spec_file``, in the network namespace ``netns`` if given."""
    argv = ["unshare", "--mount", "--uts", "--propagation", "private"]
    argv += [sys.executable, "-I", str(Path(__file__).resolve()), str(spec_file)]
    return ["nsenter", f"--net={netns}", *argv] if netns is not None else argv


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


def build_root(scratch: Path, traversable: list[str]) -> Path:
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
    # The interpreter an image is mapped onto may sit below a folder private to root (/root, a 0700
    # parent); the container's view of each such folder is searchable, so the image runs as any user (a
    # change to the container's copy-on-write layer only, never to this machine).
    for path in traversable:
        for parent in (Path(path), *Path(path).parents):
            where = inside(root, str(parent))
            if where.is_dir() and not where.stat().st_mode & 0o001:
                where.chmod(where.stat().st_mode & 0o7777 | 0o011)
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
    spec = Spec(**json.loads(Path(sys.argv[1]).read_text()))
    root = build_root(Path(spec.scratch), spec.traversable)
    inside(root, "/etc/hosts").write_text(spec.hosts)
    inside(root, "/etc/hostname").write_text(spec.hostname + "\n")
    with inside(root, "/etc/passwd").open("a") as passwd, inside(root, "/etc/group").open("a") as group:
        for name, uid, gid in spec.users:
            passwd.write(f"{name}:x:{uid}:{gid}::/nonexistent:/usr/sbin/nologin\n")
            group.write(f"{name}:x:{gid}:\n")
    for m in spec.mounts:
        bind(root, str(m["source"]), str(m["target"]), bool(m["readOnly"]))
    if spec.read_only_root:
        mount("-o", "remount,bind,ro", str(root))
    socket.sethostname(spec.hostname)
    os.chroot(root)
    os.chdir(spec.working_dir or "/")
    os.setgroups(spec.groups)
    os.setgid(spec.gid)
    os.setuid(spec.uid)
    os.umask(0o022)
    env = spec.env
    argv = spec.argv
    try:
        os.execvpe(argv[0], argv, env)  # noqa: S606 (the container's own command)
    except OSError as exc:
        print(f"exec {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        raise SystemExit(127) from None


if __name__ == "__main__":
    main()
