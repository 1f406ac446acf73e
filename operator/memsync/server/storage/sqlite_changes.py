"""Whether an SQLite database has committed anything, read from its write-ahead log's shared index.

A sidecar's probe asks whether a store changed since its last listing. On SQLite the answer (the store's
change marker) is one indexed statement; measured inside a busy server that statement, with its two lock
calls on the ``-shm`` file, cost about a quarter of the probe's CPU. This module lets a process remember the
markers it read and answer from memory until the database commits anything at all.

In WAL mode every connection to a database, in any process, coordinates through the WAL-index, the ``-shm``
file next to the database, mapped into memory by each. Its first 96 bytes are the WAL-index header, kept
twice (SQLite's "WAL-mode File Format" document, for the unix VFS): the writer of a commit rewrites the second
copy, then the first, and a reader that finds both copies identical has a consistent header. The header
carries a counter that every commit advances, the number of valid frames in the log and the log's salts
(changed whenever the log starts over), so any commit, by any connection of any process, changes its bytes;
and a commit becomes visible to readers exactly when it does (a reader finds its snapshot through it).
The format is fixed by SQLite's promise that connections of different versions may share one database.

:class:`WalIndex` maps the header read-only and returns its bytes as a *state* (None while a commit is
rewriting it, or before SQLite has set it up). :class:`MarkerMemory` remembers a store's marker together with
the state read *before* the statement that read it, and answers only while the header still has exactly that
state: the statement's snapshot is at least as new as that state, and an unchanged header proves nothing was
committed since, so the remembered marker is the one a statement would read now. A remembered entry with an
older state is never answered; no lock is needed (a thread can only store what it read under the state it
stores it with).

The mapping is safe to read only while this process keeps a connection open to the database: the last
connection to close may remove or shrink the ``-shm`` file, and an open connection holds SQLite's lock that
prevents that (``SqliteDatabase`` opens its index after its own connection and closes it before them).
"""

from __future__ import annotations

import mmap
import os
import threading
from typing import Final

from memsync.server.storage.change_cache import MAX_MARKERS, Marker, remember_bounded

#: The WAL-index header: two copies of 48 bytes at the start of the ``-shm`` file.
HEADER_BYTES: Final = 48
#: The header's ``isInit`` byte (nonzero once SQLite has set the index up).
IS_INIT_OFFSET: Final = 12
#: The least size of an ``-shm`` file in use (SQLite grows it in 32 KiB regions).
MIN_SHM_BYTES: Final = 2 * HEADER_BYTES


class WalIndex:
    """The WAL-index header of one SQLite database in WAL mode, mapped read-only."""

    def __init__(self, mapped: mmap.mmap) -> None:
        self._map: mmap.mmap | None = mapped

    @classmethod
    def open(cls, database_path: str) -> WalIndex | None:
        """The index of the database at ``database_path``, or None when it has none to read (not in WAL mode,
        an in-memory or URI database, a ``-shm`` that is a symlink or not yet set up)."""
        try:
            fd = os.open(database_path + "-shm", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size < MIN_SHM_BYTES:
                return None
            return cls(mmap.mmap(fd, MIN_SHM_BYTES, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ))
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)

    def state(self) -> bytes | None:
        """The header's bytes when both copies agree and SQLite has set it up; None otherwise (a commit is
        rewriting it: ask SQLite)."""
        mapped = self._map
        if mapped is None:
            return None
        try:
            both = mapped[:MIN_SHM_BYTES]
        except ValueError:  # closed by another thread meanwhile (the database is closing)
            return None
        first = both[:HEADER_BYTES]
        if first != both[HEADER_BYTES:] or not first[IS_INIT_OFFSET]:
            return None
        return first

    def close(self) -> None:
        mapped, self._map = self._map, None
        if mapped is not None:
            mapped.close()


class MarkerMemory:
    """Store id -> the change marker read under a WAL-index state; answered only while the state holds."""

    def __init__(self, *, max_markers: int = MAX_MARKERS) -> None:
        self.max_markers = max_markers
        self._lock = threading.Lock()
        self._markers: dict[str, tuple[bytes, Marker]] = {}

    def get(self, store_id: str, state: bytes) -> Marker | None:
        entry = self._markers.get(store_id)
        if entry is None or entry[0] != state:
            return None
        return entry[1]

    def put(self, store_id: str, marker: Marker, state: bytes) -> None:
        """Remember ``marker``, read by a statement that began after the header showed ``state``."""
        with self._lock:  # gets need none: an entry is only answered under the state it was read under
            remember_bounded(self._markers, store_id, (state, marker), self.max_markers)
