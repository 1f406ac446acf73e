"""The listener's rule: the cache answers only once the listener's own heartbeat has come back through the
database (a connection that answers queries but delivers no notification keeps it silent), and every
announced store, or a truncation, is forgotten in the order heard."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from psycopg import Notify

from memsync.server.storage.change_cache import ChangeCache
from memsync.server.storage.pg_changes import CHANNEL, ChangeListener


@dataclass
class Info:
    backend_pid: int = 4242


@dataclass
class FakeConnection:
    """Answers every query; delivers what ``deliver`` returns for each heartbeat sent (then stops)."""

    echo: bool
    others: list[str] = field(default_factory=list)  # payloads delivered before the heartbeat
    info: Info = field(default_factory=Info)
    sent: list[str] = field(default_factory=list)
    listener: ChangeListener | None = None

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self.sent.append(str(params[1]))

    def notifies(self, *, timeout: float) -> Iterator[Notify]:
        for payload in self.others:
            yield Notify(CHANNEL, payload, 1)
        if self.echo:
            yield Notify(CHANNEL, self.sent[-1], self.info.backend_pid)
        assert self.listener is not None
        self.listener._stop.set()  # one heartbeat is enough for a test


def listen_once(conn: FakeConnection, cache: ChangeCache) -> None:
    listener = ChangeListener("postgresql://unused", cache)
    conn.listener = listener
    listener._listen(conn)  # type: ignore[arg-type]


def remembered(cache: ChangeCache, *stores: str) -> ChangeCache:
    cache.heard(cache.clock())
    for store in stores:
        cache.put(store, (store, 1), cache.generation)
    return cache


def test_a_connection_that_delivers_nothing_never_makes_the_cache_answer() -> None:
    cache = ChangeCache()
    listen_once(FakeConnection(echo=False), cache)
    assert not cache.listening


def test_the_heartbeat_heard_back_makes_it_answer() -> None:
    cache = ChangeCache()
    conn = FakeConnection(echo=True)
    listen_once(conn, cache)
    assert conn.sent == ["#4242:1"]
    assert cache.listening


def test_announced_stores_are_forgotten_and_heartbeats_of_others_are_not_stores() -> None:
    cache = remembered(ChangeCache(), "memstore_a", "memstore_b")
    listen_once(FakeConnection(echo=True, others=["memstore_a", "#999:7"]), cache)
    assert cache.get("memstore_a") is None
    assert cache.get("memstore_b") == ("memstore_b", 1)


def test_a_truncation_forgets_every_store() -> None:
    cache = remembered(ChangeCache(), "memstore_a", "memstore_b")
    listen_once(FakeConnection(echo=True, others=[""]), cache)
    assert cache.get("memstore_a") is None and cache.get("memstore_b") is None
