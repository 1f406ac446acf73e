"""Steps on an open directory descriptor that the store folder's writes share: a temp file written in full
(``O_CREAT|O_EXCL|O_NOFOLLOW``), a moved-aside file put back without clobbering, an empty tree removed.
Nothing here follows a symlink."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def put_back(dir_fd: int, aside: str, name: str) -> None:
    """Return a file moved aside to ``name`` without clobbering anything created there meanwhile."""
    try:
        os.link(aside, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        # Written again meanwhile: keep the newest at its name, and this one beside it (never lost).
        os.rename(aside, f"{name}.memsync-kept-{secrets.token_hex(4)}", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    except OSError:
        os.rename(aside, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # no hard links on this filesystem
        return
    os.unlink(aside, dir_fd=dir_fd)


@contextmanager
def temp_file(dir_fd: int, data: bytes, mode: int, *, fsync: bool = False) -> Iterator[str]:
    """A temp file (``O_CREAT|O_EXCL|O_NOFOLLOW``) holding ``data`` in ``dir_fd``; whatever is left at its
    name afterwards is removed (nothing, once it was renamed into place)."""
    tmp = f".fs-{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, TEMP_FLAGS, mode, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)


def remove_empty_tree(dir_fd: int, name: str) -> bool:
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return False  # nothing there, not a directory, or a symlink
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        if not all(is_dir and remove_empty_tree(fd, sub) for sub, is_dir in entries):
            return False
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True
