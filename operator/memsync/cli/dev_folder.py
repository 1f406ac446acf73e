"""``memsync dev``'s folder: one run at a time, and how the rest of the CLI reaches the store it serves.

Two runs on one ``--dir`` would serve one SQLite file from two servers and sync one folder twice: the second
is refused while the first holds an exclusive lock on ``DIR/dev.lock`` (the kernel releases it when the
process ends, however it ends, so a killed run never leaves a stale lock). The lock file names the
holder's process id for the refusal.

At start, ``memsync dev`` prints the two lines that point the CLI at its store (``MEMSYNC_STORE_URL`` and
``MEMSYNC_ADMIN_KEY_FILE``, the variables of every admin command), quoted for a POSIX shell, and the
``memsync`` to run them with when the one running is not on ``PATH`` (as under ``make dev``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from memsync.cli.failures import CliError, ExitCode

LOCK_NAME: Final = "dev.lock"


@contextlib.contextmanager
def holding(base: Path) -> Iterator[None]:
    """Create ``base`` (0700) and hold its lock until the block ends; a second holder is refused."""
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = base / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise CliError(
                f"--dir {base} is in use by another memsync dev (pid {holder}): stop that one first, or pass "
                "another --dir",
                ExitCode.CONFLICT,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def memsync_command() -> str:
    """How to run this same ``memsync`` from a shell: its name when ``PATH`` finds this one, else its
    absolute path (or ``python -m memsync`` when it runs as a module)."""
    argv0 = Path(sys.argv[0])
    if argv0.name != "memsync":
        return f"{shlex.quote(sys.executable)} -m memsync"
    here = argv0.resolve()
    found = shutil.which("memsync")
    if found is not None and Path(found).resolve() == here:
        return "memsync"
    return shlex.quote(str(argv0.absolute()))


def cli_lines(url: str, key_path: Path) -> list[str]:
    """The lines printed at start: the two exports, then a first command to try in another shell."""
    return [
        "memsync dev: to use the memsync CLI on this store from another shell:",
        f"  export MEMSYNC_STORE_URL={shlex.quote(url)}",
        f"  export MEMSYNC_ADMIN_KEY_FILE={shlex.quote(str(key_path))}",
        f"  {memsync_command()} store list",
    ]
