"""PostgreSQL's announcements of changed stores, heard by one thread per server process.

The schema's trigger (``schema``, version 4) sends ``NOTIFY memsync_store_change, '<store id>'`` when a
store's change marker is written or the store is deleted (delivered when the writing transaction commits,
from whichever replica wrote), and an empty payload when the table is truncated. This thread keeps one
connection of its own listening and forgets each announced store in the :class:`ChangeCache`.

Once a second it announces a heartbeat of its own on the same channel and waits to hear it back: PostgreSQL
delivers a channel's notifications in commit order, so hearing its own heartbeat proves that every change
committed before it was sent has been heard (and forgotten), which a round trip alone would not prove (a
connection pooler that does not keep a session's LISTEN, say, answers queries and delivers nothing). The
cache answers only while those heartbeats keep coming back. A lost connection is retried with backoff,
logged once when lost and once when restored.
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
HEARTBEAT_PREFIX: Final = "#"  # a payload no store id starts with: the listeners' own heartbeats
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
        self.cache.deaf()  # (a thread still stuck in a round trip never calls heard() again: it checks stop)

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
        beat = 0
        while not self._stop.is_set():
            beat += 1
            mine = f"{HEARTBEAT_PREFIX}{conn.info.backend_pid}:{beat}"
            since = self.cache.clock()
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, mine))
            for note in conn.notifies(timeout=HEARTBEAT_S):
                if self._stop.is_set():
                    return
                if note.payload == mine:
                    self.cache.heard(since)  # everything committed before the heartbeat has been heard
                elif not note.payload:
                    self.cache.forget_all()
                elif not note.payload.startswith(HEARTBEAT_PREFIX):  # another listener's heartbeat
                    self.cache.forget((note.payload,))
