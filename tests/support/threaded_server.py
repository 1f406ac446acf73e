"""A store app served by uvicorn (memsync's own protocol settings) on a thread of the test process, on a
port of its own: for tests that watch the server from inside (its metrics registry, its log records)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from memsync.server.listen import bind
from memsync.server.protocol import uvicorn_config


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the test process keeps its own signal handlers


@contextlib.contextmanager
def served_on_a_thread(app: Any, **config: Any) -> Iterator[str]:
    """Serve ``app`` (``uvicorn_config`` keyword arguments in ``config``) until the block ends; its URL."""
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = _Server(uvicorn_config(app, host="127.0.0.1", port=port, **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
