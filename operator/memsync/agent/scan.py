"""Local change detection (docs/sync-semantics.md#detecting-changes) without re-reading every file.

A recursive scan of the store folder through directory descriptors (never following a symlink) yields
``{relpath: sha256}`` for regular files. Hashes are cached by (mtime_ns, ctime_ns, size, inode): a file whose
key is unchanged is not read again, except that a file modified within the last 2 seconds is always re-hashed
(filesystem clocks are coarse: an edit in the same tick as the previous one keeps the same mtime). The marker
is checked in the same scan, so a folder wiped mid-sync cannot pass the check and then look empty.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass, field

from memsync.agent.localfs import NotRegularFile, StoreRoot
from memsync.agent.relpath import TEMP_NAME, path_problem
from memsync.api.constants import MARKER_FILENAME
from memsync.api.hashing import marker_text, sha256_bytes

RECENT_NS = 2_000_000_000  # files changed within the last 2 s are always re-hashed
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

CacheKey = tuple[int, int, int, int]  # (mtime_ns, ctime_ns, size, inode)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


@dataclass
class HashCache:
    """rel -> (key, sha). ``hashes`` counts every file actually read and hashed (tests and benches use it)."""

    entries: dict[str, tuple[CacheKey, str]] = field(default_factory=dict)
    hashes: int = 0


@dataclass
class ScanResult:
    files: dict[str, str] = field(default_factory=dict)  # regular files: rel -> sha256
    sizes: dict[str, int] = field(default_factory=dict)  # rel -> size in bytes
    # Entries that exist but are never synced: rel -> why (symlink, FIFO, unsyncable name...). A path here is
    # neither uploaded, nor overwritten, nor treated as deleted.
    blocked: dict[str, str] = field(default_factory=dict)
    # Of those, files and folders that cannot be read (permissions, I/O errors): rel -> why. Skipped this scan
    # and tried again on the next one.
    unreadable: dict[str, str] = field(default_factory=dict)
    # Of those, regular files (nothing can be below them, unlike a folder that cannot be read).
    unreadable_files: set[str] = field(default_factory=set)
    # Of those, local names that can never be a memory path: rel -> why.
    unsyncable: dict[str, str] = field(default_factory=dict)
    marker_ok: bool = False
    hashed: int = 0

    @property
    def entry_count(self) -> int:
        """Everything in the folder other than the marker (and our temp files)."""
        return len(self.files) + len(self.blocked)


def scan(root: StoreRoot, memory_store_id: str, cache: HashCache, *, now_ns: int | None = None) -> ScanResult:
    """Scan the open store folder. Never follows a symlink; never descends into a directory symlink."""
    walk = _Walk(
        root,
        cache,
        now=time.time_ns() if now_ns is None else now_ns,
        expected_marker=sha256_bytes(marker_text(memory_store_id).encode("utf-8")),
    )
    stack: list[tuple[int, str]] = [(root.dup(), "")]
    try:
        while stack:
            dir_fd, prefix = stack.pop()
            try:
                stack.extend(walk.folder(dir_fd, prefix))
            finally:
                os.close(dir_fd)
    finally:
        for dir_fd, _ in stack:
            os.close(dir_fd)
    for rel in [r for r in cache.entries if r not in walk.seen]:
        del cache.entries[rel]
    return walk.result


@dataclass
class _Walk:
    """One scan's walk: what it found so far, and the hash cache it reads and refreshes."""

    root: StoreRoot
    cache: HashCache
    now: int
    expected_marker: str
    result: ScanResult = field(default_factory=ScanResult)
    seen: set[str] = field(default_factory=set)

    def folder(self, dir_fd: int, prefix: str) -> list[tuple[int, str]]:
        """Look at each entry of the open folder at ``prefix``; the subfolders to walk next (open)."""
        try:
            with os.scandir(dir_fd) as it:
                entries = list(it)
        except OSError as exc:
            if not prefix:
                raise  # the store folder itself: the pass fails (and is retried) as a whole
            _unreadable(self.result, prefix.rstrip("/"), exc)
            return []
        subfolders: list[tuple[int, str]] = []
        try:
            for entry in entries:
                sub = self.entry(dir_fd, prefix, entry)
                if sub is not None:
                    subfolders.append(sub)
        except BaseException:
            for sub_fd, _ in subfolders:
                os.close(sub_fd)
            raise
        return subfolders

    def entry(self, dir_fd: int, prefix: str, entry: os.DirEntry[str]) -> tuple[int, str] | None:
        """Record one entry; an open subfolder to walk, or None."""
        name = entry.name
        rel = prefix + name
        if not prefix and name == MARKER_FILENAME:
            self.result.marker_ok = _marker_matches(self.root, dir_fd, self.expected_marker)
            return None
        if TEMP_NAME.match(name):
            return None
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            _unreadable(self.result, rel, exc)
            return None
        if stat.S_ISDIR(st.st_mode):
            return self.subfolder(dir_fd, name, rel)
        if not stat.S_ISREG(st.st_mode):
            self.result.blocked[rel] = _kind(st.st_mode)
            return None
        problem = path_problem(rel)
        if problem is not None:
            self.result.blocked[rel] = f"file name that cannot be a memory path ({problem})"
            self.result.unsyncable[rel] = problem
            return None
        sha = self.file_sha(dir_fd, name, rel, st)
        if sha is not None:
            self.result.files[rel] = sha
            self.result.sizes[rel] = st.st_size
            self.seen.add(rel)
        return None

    def subfolder(self, dir_fd: int, name: str, rel: str) -> tuple[int, str] | None:
        """The subfolder opened without following a symlink, or None (recorded as blocked or unreadable)."""
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except (PermissionError, OSError) as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                self.result.blocked[rel] = "directory that cannot be opened safely"
            else:
                _unreadable(self.result, rel, exc)
            return None
        return sub, rel + "/"

    def file_sha(self, dir_fd: int, name: str, rel: str, st: os.stat_result) -> str | None:
        """The file's sha: from the cache while the file is unchanged and not recent, else read and hashed;
        None when it went away or cannot be read (recorded)."""
        key: CacheKey = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        cached = self.cache.entries.get(rel)
        recent = self.now - max(st.st_mtime_ns, st.st_ctime_ns) < RECENT_NS
        if cached is not None and cached[0] == key and not recent:
            return cached[1]
        try:
            sha, fst = self.root.hash_at(dir_fd, name)
        except FileNotFoundError:
            return None
        except NotRegularFile as exc:
            self.result.blocked[rel] = exc.strerror or "not a regular file"
            return None
        except OSError as exc:
            _unreadable(self.result, rel, exc)
            self.result.unreadable_files.add(rel)
            return None
        self.cache.hashes += 1
        self.result.hashed += 1
        key = (fst.st_mtime_ns, fst.st_ctime_ns, fst.st_size, fst.st_ino)
        self.cache.entries[rel] = (key, sha)
        return sha


def _unreadable(result: ScanResult, rel: str, exc: OSError) -> None:
    """A file or folder the agent cannot read: left alone (never uploaded, overwritten or deleted)."""
    why = exc.strerror or type(exc).__name__
    result.blocked[rel] = f"cannot be read ({why})"
    result.unreadable[rel] = why


def _marker_matches(root: StoreRoot, dir_fd: int, expected_sha: str) -> bool:
    try:
        sha, _ = root.hash_at(dir_fd, MARKER_FILENAME)
    except OSError:
        return False
    return sha == expected_sha
