"""The store server embedded in ``memsync dev``: uvicorn on a background thread, SQLite under its folder.

A failure is a ``click.ClickException`` (one line, exit code 1), as the command that runs it reports it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import uvicorn

from memsync.server import create_app
from memsync.server.listen import ListenError, bind
from memsync.server.protocol import uvicorn_config

STARTUP_TIMEOUT_S = 20.0


class _ThreadServer(uvicorn.Server):
    """uvicorn without its own signal handlers: this command owns SIGINT/SIGTERM (they start the flush)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class EmbeddedServer:
    """The store server on a background thread with its own event loop."""

    db_path: Path
    admin_key: str
    host: str
    port: int

    def __post_init__(self) -> None:
        self.url = f"http://{self.host}:{self.port}"
        # Bound first: a port in use is said before the app starts (and logs that it is ready).
        try:
            self._socket = bind(self.host, self.port)
        except ListenError as exc:
            raise click.ClickException(
                f"the embedded store server: {exc} (choose another with --port)"
            ) from exc
        app = create_app(self.db_path, self.admin_key, self.url, access_logs=False)
        # One developer's sessions, in the process that also runs their sync: the loop is late whenever the
        # sync is busy, which is no overload, so nothing is refused for lag here.
        self._server = _ThreadServer(uvicorn_config(app, host=self.host, port=self.port, max_loop_lag_s=0))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="memsync-dev-store", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive():
                raise click.ClickException(f"the embedded store server stopped on {self.host}:{self.port}")
            if time.monotonic() > deadline:
                self.stop()
                raise click.ClickException(
                    f"the embedded store server did not start within {STARTUP_TIMEOUT_S}s"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
