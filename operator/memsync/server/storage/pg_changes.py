"""PostgreSQL's announcements of changed stores, heard by one thread per server process.

The schema's trigger (``schema``, version 4) sends ``NOTIFY memsync_store_change, '<store id>'`` when a
store's change marker is written or the store is deleted (delivered when the writing transaction commits,
from whichever replica wrote), and an empty payload when the table is truncated. This thread keeps one
connection of its own listening, forgets each announced store in the :class:`ChangeCache`, and confirms once
a second, with a round trip, that the connection still works; the cache answers only while those
confirmations keep coming. A lost connection is retried with backoff, logged once when lost and once when
restored.
"""

from __future__ import annotations

import logging
import threading
from typing import Final

import psycopg

from memsync.server.storage.change_cache import ChangeCache

logger = logging.getLogger("memsync.server")

CHANNEL: Final = "memsync_store_change"
APPLICATION_NAME: Final = "memsync-store-changes"  # how the connection shows in pg_stat_activity
HEARTBEAT_S: Final = 1.0
RETRY_MAX_S: Final = 10.0


class ChangeListener:
    """Runs ``LISTEN memsync_store_change`` on its own connection and keeps ``cache`` told."""

    def __init__(self, url: str, cache: ChangeCache, *, connect_timeout_s: int = 10) -> None:
        self.url = url
        self.cache = cache
        self.connect_timeout_s = connect_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memsync-store-changes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=HEARTBEAT_S * 3)
        self.cache.deaf()

    def _run(self) -> None:
        delay, lost = 0.5, False
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self.url,
                    autocommit=True,
                    application_name=APPLICATION_NAME,
                    connect_timeout=self.connect_timeout_s,
                    # a dead peer is noticed within about 5 + 3 x 2 s even when no packet says so
                    keepalives=1,
                    keepalives_idle=5,
                    keepalives_interval=2,
                    keepalives_count=3,
                ) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if lost:
                        logger.warning("store change notifications heard again: probes answered from memory")
                    delay, lost = 0.5, False
                    self._listen(conn)
            except Exception as exc:  # whatever broke, the cache must stop answering
                self.cache.deaf()
                if not lost and not self._stop.is_set():
                    logger.warning(
                        "store change notifications lost: every probe reads the database until they are "
                        "heard again",
                        extra={"error": type(exc).__name__, "retry_max_s": RETRY_MAX_S},
                    )
                lost = True
            if self._stop.wait(delay):
                break
            delay = min(delay * 2, RETRY_MAX_S)

    def _listen(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        while not self._stop.is_set():
            since = self.cache.clock()
            conn.execute("SELECT 1")  # every notification sent before this answer is now in hand
            for note in conn.notifies(timeout=HEARTBEAT_S):
                if note.payload:
                    self.cache.forget((note.payload,))
                else:
                    self.cache.forget_all()
                if self._stop.is_set():
                    return
            self.cache.heard(since)
