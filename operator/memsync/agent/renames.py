"""Linux ``renameat2``: the two atomic renames the standard library lacks, for compare-and-swap writes.

``RENAME_EXCHANGE`` swaps two names in one step, so a file can be replaced and what it replaced examined
afterwards (and swapped back if it was not what was expected); ``RENAME_NOREPLACE`` creates a name only if
nothing is there. Both raise ``Unsupported`` where the kernel, the C library or the filesystem lacks them;
callers then fall back to a plain rename after a re-check, the best a portable program can do.

A ctypes call, not a dependency: the one system call is all that is needed, and no maintained package on
PyPI wraps it better than these few lines.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}

_lock = threading.Lock()
_libc: ctypes.CDLL | None = None


class Unsupported(OSError):
    """This system or filesystem cannot do the atomic rename asked for."""


def libc() -> ctypes.CDLL:
    """The C library, loaded once."""
    global _libc  # noqa: PLW0603 (a lazily loaded handle)
    with _lock:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return _libc


def _renameat2(dir_fd: int, src: str, dst: str, flags: int) -> None:
    try:
        call = libc().renameat2
    except (OSError, AttributeError):
        raise Unsupported(errno.ENOSYS, "renameat2 is not available") from None
    if call(dir_fd, os.fsencode(src), dir_fd, os.fsencode(dst), flags) == 0:
        return
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        raise Unsupported(code, os.strerror(code), dst)
    raise OSError(code, os.strerror(code), dst)


def exchange(dir_fd: int, a: str, b: str) -> None:
    """Swap the names ``a`` and ``b`` in the directory ``dir_fd`` atomically; FileNotFoundError when either
    is missing."""
    _renameat2(dir_fd, a, b, RENAME_EXCHANGE)


def rename_noreplace(dir_fd: int, src: str, dst: str) -> None:
    """Rename ``src`` to ``dst`` in ``dir_fd`` only if nothing is at ``dst`` (FileExistsError otherwise)."""
    _renameat2(dir_fd, src, dst, RENAME_NOREPLACE)
