"""The project's environment where the image has it, for the processes tests run as a container would.

The image installs memsync into a virtual environment at ``/opt/memsync`` (see the Dockerfile). The process
kubelet's containers, and the test that runs the sidecar as uid 65534, must not depend on where the clone
lives: a parent of mode 0700 (as ``mktemp -d`` makes, and as ``/root`` is) keeps every other user out of the
clone's ``.venv``, and a Pod's volume at ``/tmp`` hides a clone under ``/tmp``. So they see the project at the
image's fixed path instead, through three read-only bind mounts made inside their own mount namespace:

==========================  ================================================================================
``/opt/memsync``            a small tree made here (:func:`stage`): ``pyvenv.cfg`` naming this machine's
                            interpreter, ``bin/python``, the console scripts with ``/opt/memsync/bin/python``
                            as their interpreter, and a ``.pth`` that puts ``src`` and ``deps`` on the path
``/opt/memsync/src``        the clone's ``operator/`` (the ``memsync`` package, as its editable install runs)
``/opt/memsync/deps``       the clone's virtualenv ``site-packages`` (the dependencies; its ``.pth`` files are
                            not read from there, so the editable install's path to the clone is never used)
==========================  ================================================================================

Once bind-mounted, what a process may read is decided by the modes at the mount's path, not by those of the
clone's parents. Only the interpreter stays where this machine has it (``bin/python`` is a link to it, and its
shared library is found by an absolute path compiled into it), so the directories above it that another user
cannot search are listed in :attr:`ImageEnv.traversable`: the container's root makes them searchable in its
own copy-on-write layer (``tests/cluster/tier/launcher.py``), never on this machine.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib.metadata import distribution
from pathlib import Path

PREFIX = "/opt/memsync"
BIN = f"{PREFIX}/bin"
#: The repository's ``operator/`` folder: the import root of the ``memsync`` package.
SOURCE = Path(__file__).resolve().parents[2] / "operator"


@dataclass(frozen=True)
class Bind:
    source: str
    target: str


@dataclass(frozen=True)
class ImageEnv:
    """What a container needs to see the project at ``/opt/memsync``: the binds (in mount order) and the
    directories of this machine's interpreter that must be searchable by the container's user."""

    binds: tuple[Bind, ...]
    traversable: tuple[str, ...]


def _site_packages() -> Path:
    """This virtualenv's ``site-packages`` (where pip installed the dependencies)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return Path(sys.prefix) / "lib" / version / "site-packages"


def _console_scripts() -> dict[str, str]:
    """name -> ``module:function`` of the project's console scripts, as its metadata declares them."""
    eps = distribution("memsync").entry_points
    return {ep.name: ep.value for ep in eps if ep.group == "console_scripts"}


def _script(target: str) -> str:
    module, _, function = target.partition(":")
    return (
        f"#!{BIN}/python\n"
        "import sys\n"
        f"from {module} import {function}\n"
        "if __name__ == '__main__':\n"
        f"    sys.exit({function}())\n"
    )


def stage(directory: Path) -> ImageEnv:
    """Lay out ``directory`` as the image's ``/opt/memsync`` (idempotent) and say how to mount it."""
    base = Path(sys._base_executable)  # the interpreter this virtualenv was made from
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = directory / "lib" / version / "site-packages"
    for d in (directory / "bin", site, directory / "src", directory / "deps"):
        d.mkdir(parents=True, exist_ok=True)
    (directory / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\n"
    )
    for name in ("python", "python3", version):
        link = directory / "bin" / name
        link.unlink(missing_ok=True)
        link.symlink_to(base)
    for name, target in _console_scripts().items():
        script = directory / "bin" / name
        script.write_text(_script(target))
        script.chmod(0o755)
    # Relative lines: joined with the site directory, so the tree works wherever it is mounted.
    (site / "memsync-image.pth").write_text("../../../src\n../../../deps\n")
    for path in (directory, *directory.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or path.parent.name == "bin" else 0o644)
    binds = (
        Bind(str(directory), PREFIX),
        Bind(str(SOURCE), f"{PREFIX}/src"),
        Bind(str(_site_packages()), f"{PREFIX}/deps"),
    )
    return ImageEnv(binds, (str(base.resolve().parent), sys.base_prefix))
