"""The safe filesystem layer of one store folder (docs/sync-semantics.md#the-store-folder).

Everything happens relative to an open directory descriptor of the store root, opened with
``O_DIRECTORY|O_NOFOLLOW``; every path component below it is opened with ``O_NOFOLLOW`` too, so a symlink
planted anywhere in the folder is never followed and nothing outside the folder is ever read or written.
Files are written atomically (a ``.fs-<16 hex>.tmp`` temp file opened ``O_CREAT|O_EXCL|O_NOFOLLOW`` with
mode 0600 in the same directory, fsync, rename); missing directories are created one component at a time
with mode 0700.

Paths here are *relative* store paths (``notes/todo.md``): the wire path without its leading ``/``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from memsync.agent import renames
from memsync.agent.dirfd import DIR_FLAGS, put_back, remove_empty_tree, temp_file
from memsync.api.constants import MARKER_FILENAME
from memsync.api.hashing import marker_text, sha256_bytes

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 64 * 1024


class NotRegularFile(OSError):
    """The path exists but is not a regular file (symlink, FIFO, device, socket, directory)."""


@dataclass(frozen=True)
class RootId:
    """The identity of the store folder we created: a replaced folder has another (dev, ino)."""

    dev: int
    ino: int


class RootMissing(OSError):
    """The store folder does not exist."""


class RootReplaced(OSError):
    """The store folder's path is now a symlink, a file, or a directory other than the one we created."""


def _split(rel: str) -> tuple[list[str], str]:
    parts = rel.split("/")
    return parts[:-1], parts[-1]


class StoreRoot:
    """An open store folder. Use ``with open_root(path) as root:``; all methods take relative paths.

    ``dir_mode`` and ``file_mode`` are the modes of the directories and files it creates (0700 and 0600 for a
    store folder; ``memsync store export`` writes an ordinary tree through the same code with 0755/0644).
    """

    def __init__(self, fd: int, path: Path, *, dir_mode: int = 0o700, file_mode: int = 0o600) -> None:
        self.fd = fd
        self.path = path
        self.dir_mode = dir_mode
        self.file_mode = file_mode
        st = os.fstat(fd)
        self.identity = RootId(st.st_dev, st.st_ino)
        # Worker threads may still be using the root when a cancelled pass closes it: every use starts with a
        # dup() under this lock, so a closed (and possibly reused) descriptor number is never touched.
        self._lock = threading.Lock()

    def dup(self) -> int:
        """A private descriptor of the root directory (the caller closes it)."""
        with self._lock:
            if self.fd < 0:
                raise OSError(errno.EBADF, "the store folder was closed", str(self.path))
            return os.dup(self.fd)

    # --- directories ----------------------------------------------------------------------------------

    @contextmanager
    def walk(self, dirs: list[str], *, create: bool = False) -> Iterator[int]:
        """An fd of the directory ``dirs`` below the root, each component opened with O_NOFOLLOW.

        Missing components are created (``dir_mode``) when ``create``; a symlink anywhere raises ELOOP.
        """
        fd = self.dup()
        try:
            for name in dirs:
                try:
                    nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(name, self.dir_mode, dir_fd=fd)
                    except FileExistsError:
                        pass
                    nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def parent_dir(self, rel: str, *, create: bool = False) -> contextlib.AbstractContextManager[int]:
        """An fd of ``rel``'s parent directory (see ``walk``)."""
        return self.walk(_split(rel)[0], create=create)

    # --- files ----------------------------------------------------------------------------------------

    def _open_regular(self, dir_fd: int, name: str) -> int:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise NotRegularFile(errno.ELOOP, "is a symlink", name) from None
            if exc.errno in (errno.ENXIO, errno.EISDIR):
                raise NotRegularFile(exc.errno, "is not a regular file", name) from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise NotRegularFile(errno.EINVAL, "is not a regular file", name)
        return fd

    def read_bytes(self, rel: str) -> bytes:
        """The file's bytes; FileNotFoundError when absent; NotRegularFile for anything but a regular file."""
        _, name = _split(rel)
        with self.parent_dir(rel) as dir_fd:
            fd = self._open_regular(dir_fd, name)
            try:
                chunks = []
                while True:
                    chunk = os.read(fd, _CHUNK)
                    if not chunk:
                        break
                    chunks.append(chunk)
                return b"".join(chunks)
            finally:
                os.close(fd)

    def hash_at(self, dir_fd: int, name: str) -> tuple[str, os.stat_result]:
        """SHA-256 of a regular file in an open directory (streamed), and the fstat of what was hashed."""
        fd = self._open_regular(dir_fd, name)
        try:
            st = os.fstat(fd)
            digest = hashlib.sha256()
            while True:
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    break
                digest.update(chunk)
            return digest.hexdigest(), st
        finally:
            os.close(fd)

    def sha_of(self, rel: str) -> str | None:
        """The file's current SHA-256, or None when nothing is there. NotRegularFile for a non-file."""
        _, name = _split(rel)
        try:
            with self.parent_dir(rel) as dir_fd:
                return self.hash_at(dir_fd, name)[0]
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP and not isinstance(exc, NotRegularFile):
                raise NotRegularFile(errno.ELOOP, "a parent directory is a symlink", rel) from None
            raise

    def exists(self, rel: str) -> bool:
        """Whether anything at all (file, symlink, FIFO...) is at ``rel``; never follows a symlink."""
        _, name = _split(rel)
        try:
            with self.parent_dir(rel) as dir_fd:
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                return True
        except FileNotFoundError:
            return False
        except NotADirectoryError:
            return False
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a parent is a symlink: something is there, and it is not ours
                return True
            raise

    def siblings(self, rel: str, prefix: str) -> list[str]:
        """Relative paths of the entries beside ``rel`` whose names start with ``prefix`` (sorted)."""
        dirs, _ = _split(rel)
        try:
            with self.walk(dirs) as dir_fd, os.scandir(dir_fd) as entries:
                names = sorted(e.name for e in entries if e.name.startswith(prefix))
        except OSError:
            return []
        return ["/".join([*dirs, n]) for n in names]

    def remove_empty_folder(self, rel: str) -> bool:
        """Remove the directory at ``rel`` if it holds nothing but empty directories (what a file moved or
        deleted out of a folder leaves behind), so a memory of that path can be written. Never follows a
        symlink; anything else there is left alone. True when something was removed."""
        _, name = _split(rel)
        try:
            with self.parent_dir(rel) as dir_fd:
                return remove_empty_tree(dir_fd, name)
        except OSError:
            return False

    def holds_file(self, rel: str) -> bool:
        """Whether something other than a directory is at ``rel`` (never follows a symlink).

        A directory where a synced file was (the file replaced by a folder of the same name) means the file
        is gone; anything else (a file, a symlink, a FIFO, an unreadable parent) means it is not.
        """
        _, name = _split(rel)
        try:
            with self.parent_dir(rel) as dir_fd:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:
            return True
        return not stat.S_ISDIR(st.st_mode)

    def write_bytes(self, rel: str, data: bytes, *, fsync: bool = False) -> None:
        """Write atomically: temp file (O_EXCL|O_NOFOLLOW, ``file_mode``) in the same directory, then rename.

        Readers never see a partial file (the rename is atomic). Durability is batched: instead of an fsync
        per file (2 ms each on a disk, most of a 2,000-memory mount), the engine calls ``sync_filesystem``
        once after a batch of writes and before it records them in the saved baseline.
        """
        _, name = _split(rel)
        with self.parent_dir(rel, create=True) as dir_fd:
            try:
                existing = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                existing = None
            if existing is not None and not stat.S_ISREG(existing.st_mode):
                raise NotRegularFile(errno.EEXIST, "something other than a regular file is in the way", rel)
            with temp_file(dir_fd, data, self.file_mode, fsync=fsync) as tmp:
                os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def replace_if(self, rel: str, data: bytes, expected_sha: str | None) -> bool:
        """Write ``data`` at ``rel`` only if the file there still hashes to ``expected_sha`` (None: only if
        nothing is there): a compare-and-swap against the agent's edits. False (nothing written) if changed.

        A new file is created with ``RENAME_NOREPLACE``; an existing one is swapped in with
        ``RENAME_EXCHANGE``, which fails if it was deleted meanwhile, and what it took out is re-hashed and
        swapped back unless expected. Without those renames: re-hash, then rename."""
        _, name = _split(rel)
        if self.sha_of(rel) != expected_sha:
            return False
        with self.parent_dir(rel, create=True) as dir_fd, temp_file(dir_fd, data, self.file_mode) as tmp:
            try:
                if expected_sha is None:
                    renames.rename_noreplace(dir_fd, tmp, name)
                    return True
                renames.exchange(dir_fd, tmp, name)
            except (FileExistsError, FileNotFoundError):
                return False  # created, or deleted, since the hash
            except renames.Unsupported:
                if self.sha_of(rel) != expected_sha:
                    return False
                os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                return True
            try:
                taken: str | None = self.hash_at(dir_fd, tmp)[0]
            except OSError:
                taken = None  # replaced by something that is not a file: swap it back untouched
            if taken == expected_sha:
                return True  # the temp name now holds the replaced file, which _temp_file removes
            try:
                renames.exchange(dir_fd, tmp, name)
            except FileNotFoundError:  # the new file was deleted meanwhile: the edit goes back to its name
                put_back(dir_fd, tmp, name)
                return False
            if self.hash_at(dir_fd, tmp)[0] != sha256_bytes(data):
                # written in place during the swap: keep that edit beside the file, never drop it
                os.rename(
                    tmp, f"{name}.memsync-kept-{secrets.token_hex(4)}", src_dir_fd=dir_fd, dst_dir_fd=dir_fd
                )
            return False

    def remove_if(self, rel: str, expected_sha: str) -> bool:
        """Remove the file only if it still hashes to ``expected_sha`` (re-hash right before the unlink).

        Returns True when removed (or already gone), False when the file changed in the meantime. Empty parent
        directories left behind are removed too (never the root).

        An edit that lands between the hash and the removal (an editor replacing the file by rename, say) must
        not be unlinked: the file is first moved aside atomically to a temp name, what was moved is hashed
        again, and only bytes that still match are unlinked; anything else is put back.
        """
        dirs, name = _split(rel)
        try:
            with self.parent_dir(rel) as dir_fd:
                sha, _ = self.hash_at(dir_fd, name)
                if sha != expected_sha:
                    return False
                aside = f".fs-{secrets.token_hex(8)}.tmp"
                os.rename(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                try:
                    moved_sha: str | None = self.hash_at(dir_fd, aside)[0]
                except OSError:
                    moved_sha = None  # not a regular file any more: put it back untouched
                if moved_sha != expected_sha:
                    put_back(dir_fd, aside, name)
                    return False
                os.unlink(aside, dir_fd=dir_fd)
        except FileNotFoundError:
            return True
        except NotADirectoryError:
            return True
        self._prune(dirs)
        return True

    def _prune(self, dirs: list[str]) -> None:
        while dirs:
            try:
                with self.walk(dirs[:-1]) as dir_fd:
                    os.rmdir(dirs[-1], dir_fd=dir_fd)
            except OSError:
                return
            dirs = dirs[:-1]

    # --- the marker (docs/sync-semantics.md#the-marker-file) ---------------------------------------------

    def write_marker(self, memory_store_id: str) -> None:
        self.write_bytes(MARKER_FILENAME, marker_text(memory_store_id).encode("utf-8"), fsync=True)

    def marker_ok(self, memory_store_id: str) -> bool:
        """A regular file (not a symlink) whose SHA-256 is that of the expected marker text."""
        try:
            with self.walk([]) as dir_fd:
                sha, _ = self.hash_at(dir_fd, MARKER_FILENAME)
        except OSError:
            return False
        return sha == sha256_bytes(marker_text(memory_store_id).encode("utf-8"))

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def __enter__(self) -> StoreRoot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sync_filesystem(path: Path) -> None:
    """Flush the filesystem holding ``path`` to stable storage (Linux ``syncfs``; else ``sync``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        os.sync()
        return
    try:
        if renames.libc().syncfs(fd) != 0:
            os.sync()
    except (OSError, AttributeError):
        os.sync()
    finally:
        os.close(fd)


def _open_root_fd(path: Path, parent_fd: int | None = None) -> int:
    """Open the store folder (relative to ``parent_fd`` when given), never following a symlink at its name."""
    try:
        if parent_fd is None:
            return os.open(path, DIR_FLAGS)
        return os.open(path.name, DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        raise RootMissing(errno.ENOENT, "the memory store folder does not exist", str(path)) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise RootReplaced(
                exc.errno, "the memory store folder is a symlink or not a directory", str(path)
            ) from None
        raise


def open_root(path: Path, expected: RootId | None = None) -> StoreRoot:
    """Open the store folder without following a symlink at its last component.

    Raises RootMissing when nothing is there, RootReplaced when it is a symlink, not a directory, or (when
    ``expected`` is given) a different directory from the one we created.
    """
    root = StoreRoot(_open_root_fd(path), path)
    if expected is not None and root.identity != expected:
        root.close()
        raise RootReplaced(
            errno.EEXIST, "the memory store folder is not the directory memsync created", str(path)
        )
    return root


def root_is_empty(path: Path) -> bool:
    """Whether the folder at ``path`` (not followed if a symlink) has no entries at all."""
    try:
        fd = os.open(path, DIR_FLAGS)
    except OSError:
        return False
    try:
        with os.scandir(fd) as it:
            return next(iter(it), None) is None
    finally:
        os.close(fd)


def dir_identity(path: Path) -> RootId | None:
    """The (dev, ino) of the directory at ``path`` (symlinks followed), or None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        return RootId(st.st_dev, st.st_ino)
    finally:
        os.close(fd)


def recreate_root(path: Path, parent: RootId) -> StoreRoot:
    """Re-create the store folder (or re-open the empty directory now there) for a recovery.

    Only inside the very parent directory recorded at mount: the parent is opened once and checked against
    ``parent``, then the folder is created and opened relative to that descriptor (its last component with
    O_NOFOLLOW). A parent swapped for a symlink (or another directory) can therefore never redirect the
    download elsewhere, not even between the check and the writes. Raises RootReplaced otherwise.
    """
    try:
        parent_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise RootReplaced(
            exc.errno, "the memory store folder's parent directory is gone", str(path.parent)
        ) from None
    try:
        st = os.fstat(parent_fd)
        if RootId(st.st_dev, st.st_ino) != parent:
            raise RootReplaced(
                errno.EEXIST,
                "the memory store folder's parent directory is not the one memsync mounted into",
                str(path.parent),
            )
        with contextlib.suppress(FileExistsError):
            os.mkdir(path.name, 0o700, dir_fd=parent_fd)
        fd = _open_root_fd(path, parent_fd)
    finally:
        os.close(parent_fd)
    return StoreRoot(fd, path)


def make_root(path: Path) -> tuple[StoreRoot, list[Path]]:
    """Create the store folder (0700) and any missing ancestors (0700); refuse if anything is there.

    Returns the open root and the list of directories this call created (deepest last), so a failed mount
    removes exactly what it made. Raises FileExistsError when something (even a dangling symlink) is there.
    """
    created: list[Path] = []
    missing: list[Path] = []
    probe = path.parent
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(0o700)
            created.append(directory)
        except FileExistsError:
            pass
    path.mkdir(0o700)  # FileExistsError if anything (even a dangling symlink) appeared meanwhile
    created.append(path)
    return open_root(path), created
