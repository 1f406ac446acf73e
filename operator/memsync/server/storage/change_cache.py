"""The stores' change markers, remembered by one PostgreSQL server process while it hears every change.

A sidecar's probe asks whether a store changed since its last listing; on PostgreSQL the answer (the store's
change marker) is a network round trip, most of the probe's cost. This cache lets the process answer it from
memory, and is only as good as its invalidation:

- a marker is remembered only from a read that began after every invalidation the cache has seen: each
  invalidation starts a new *generation*, and ``put`` keeps a marker only in the generation its read began
  in (so a read that saw the old marker before a write committed cannot store it after the write was heard);
- every committed change of a store's marker, and every deletion, is announced by the database itself
  (a trigger, ``NOTIFY``) to the process's listening connection (``pg_changes``), which forgets that store;
  a write made by this process forgets its stores as soon as it commits, before it is answered;
- the cache answers only while its listener is connected and has recently heard its own heartbeat come back
  through the database (``pg_changes``): when the listener's connection is lost every marker is forgotten;
  when the heartbeats stop coming back nothing is answered from memory until one does, and by then every
  change announced meanwhile has been heard and forgotten. A change is therefore missed at most for the time
  its notification takes to arrive, or ``liveness_s`` when the listening connection dies silently.

Reads that miss go to the database as before (and are remembered on the way back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Final, TypeVar

Marker = tuple[str, int]
Entry = TypeVar("Entry")

#: Far more stores than a process serves probes for (a marker is about 200 bytes); the oldest go first.
MAX_MARKERS: Final = 100_000
#: How long a heartbeat heard back is good for (the listener sends one every second).
LIVENESS_S: Final = 3.0


def remember_bounded(markers: dict[str, Entry], store_id: str, entry: Entry, max_markers: int) -> None:
    """Remember ``entry`` for ``store_id``, forgetting the oldest remembered beyond ``max_markers`` (the
    caller holds its lock)."""
    markers[store_id] = entry
    if len(markers) > max_markers:
        del markers[next(iter(markers))]


class ChangeCache:
    """Store id -> change marker, valid only while changes are being heard (see the module docstring)."""

    def __init__(
        self,
        *,
        max_markers: int = MAX_MARKERS,
        liveness_s: float = LIVENESS_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_markers = max_markers
        self.liveness_s = liveness_s
        self.clock = clock
        self._lock = threading.Lock()
        self._markers: dict[str, Marker] = {}
        self._generation = 0
        self._heard_until: float | None = None  # None: not listening

    @property
    def generation(self) -> int:
        """Read before the statement whose answer is then ``put``."""
        return self._generation

    @property
    def listening(self) -> bool:
        heard_until = self._heard_until
        return heard_until is not None and self.clock() < heard_until

    def get(self, store_id: str) -> Marker | None:
        """The remembered marker; None when not remembered or changes are not being heard now."""
        if not self.listening:
            return None
        return self._markers.get(store_id)

    def put(self, store_id: str, marker: Marker, generation: int) -> None:
        """Remember a marker read by a statement that began in ``generation`` (dropped if that has passed)."""
        with self._lock:
            if generation != self._generation or self._heard_until is None:
                return
            remember_bounded(self._markers, store_id, marker, self.max_markers)

    def forget(self, store_ids: Iterable[str]) -> None:
        """These stores changed (a notification, or this process's own committed write)."""
        with self._lock:
            self._generation += 1
            for store_id in store_ids:
                self._markers.pop(store_id, None)

    def forget_all(self) -> None:
        with self._lock:
            self._generation += 1
            self._markers.clear()

    def heard(self, since: float) -> None:
        """The listener is connected and every change committed before ``since`` (a clock reading) has been
        forgotten: answer from memory until ``since + liveness_s`` unless confirmed again."""
        with self._lock:
            if self._heard_until is None:  # (re)started: nothing remembered before can be trusted
                self._generation += 1
                self._markers.clear()
            self._heard_until = since + self.liveness_s

    def deaf(self) -> None:
        """The listener lost its connection: forget everything, answer nothing from memory."""
        with self._lock:
            self._generation += 1
            self._markers.clear()
            self._heard_until = None
