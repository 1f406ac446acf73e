"""Shared fixtures: the real store server (``python -m memsync store serve``) on a free loopback port.

``store_server`` (session scope) is shared by every test of one pytest process — with xdist each worker
process gets its own server, because session-scoped fixtures are per worker. Tests isolate themselves by
creating their own stores. ``fresh_store_server`` (function scope) is private to one test, for tests that
restart or kill it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from hypothesis import settings

from support.postgres import MISSING as PG_MISSING
from support.postgres import PostgresServer, find_pg_bin
from support.server_process import (
    STARTUP_TIMEOUT_S,
    free_port,
    kill_process,
    spawn_store_server,
    stop_process,
    wait_until_ready,
)

if TYPE_CHECKING:
    from memsync.client import StoreClient

# No time limit per generated example: a test's verdict never depends on how busy the machine is (a 200 ms
# deadline failed on a 2-core machine while other tiers built). Speed is the benchmarks' business.
settings.register_profile("memsync", deadline=None)
settings.load_profile("memsync")

__all__ = [
    "API_HEADERS",
    "STARTUP_TIMEOUT_S",
    "RunningStoreServer",
    "StoreApi",
    "free_port",
    "launch_store_server",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
API_HEADERS = {"anthropic-version": "2023-06-01", "anthropic-beta": "agent-memory-2026-07-22"}


@dataclass
class RunningStoreServer:
    url: str
    admin_key: str
    db_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log_path: Path | None = field(default=None, repr=False)
    port: int = 0
    extra_args: tuple[str, ...] = ()
    database_url: str | None = None  # PostgreSQL; None: the SQLite file db_path

    @property
    def backend(self) -> str:
        return "sqlite" if self.database_url is None else "postgresql"

    def admin_client(self, **kw: Any) -> StoreClient:
        """A StoreClient authenticated with the admin key (use it with ``async with``)."""
        from memsync.client import StoreClient

        return StoreClient(self.url, api_key=self.admin_key, **kw)

    async def mint_secret(self, stores: list[tuple[str, str]], session_id: str | None = None) -> str:
        """Mint a session with ``[(memory_store_id, access)]`` attached; return its work-item secret."""
        body = self._mint_body(stores, session_id)
        async with httpx.AsyncClient(base_url=self.url, timeout=30.0) as http:
            resp = await http.post(
                "/v1/memsync/sessions",
                params={"beta": "true"},
                json=body,
                headers={**API_HEADERS, "x-api-key": self.admin_key},
            )
        resp.raise_for_status()
        secret: str = resp.json()["work_secret"]
        return secret

    def mint_secret_sync(self, stores: list[tuple[str, str]], session_id: str | None = None) -> str:
        """The same as ``mint_secret`` for synchronous tests."""
        resp = httpx.post(
            f"{self.url}/v1/memsync/sessions",
            params={"beta": "true"},
            json=self._mint_body(stores, session_id),
            headers={**API_HEADERS, "x-api-key": self.admin_key},
            timeout=30.0,
        )
        resp.raise_for_status()
        secret: str = resp.json()["work_secret"]
        return secret

    @staticmethod
    def _mint_body(stores: list[tuple[str, str]], session_id: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "resources": [
                {"type": "memory_store", "memory_store_id": store_id, "access": access}
                for store_id, access in stores
            ]
        }
        if session_id is not None:
            body["session_id"] = session_id
        return body

    def stored_bytes(self) -> bytes:
        """Everything the database holds, as bytes: the SQLite files, or every PostgreSQL row as text."""
        if self.database_url is None:
            paths = [self.db_path.with_name(self.db_path.name + s) for s in ("", "-wal", "-shm")]
            return b"".join(p.read_bytes() for p in paths if p.exists())
        import psycopg

        chunks: list[bytes] = []
        with psycopg.connect(self.database_url) as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
            ).fetchall()
            for (table,) in tables:
                for (row,) in conn.execute(f'SELECT t::text FROM "{table}" t'):  # noqa: S608
                    chunks.append(row.encode())
        return b"\n".join(chunks)

    def log_text(self) -> str:
        """What the server wrote to stdout/stderr so far (for failure messages)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    # --- process control, for tests that restart or kill the server ------------------------------------

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Start (or restart) the server process on the same port, db and key; wait until it answers."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("store server is already running")
        assert self.log_path is not None
        env = {
            **os.environ,
            "MEMSYNC_ADMIN_KEY": self.admin_key,
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("MEMSYNC_STORE_URL", None)
        self.process = spawn_store_server(
            port=self.port,
            db_path=self.database_url or self.db_path,
            log_path=self.log_path,
            env=env,
            extra_args=self.extra_args,
            cwd=self.db_path.parent,
        )
        try:
            wait_until_ready(self.process, self.url, timeout_s=timeout_s, log_text=self.log_text)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period. Idempotent."""
        stop_process(self.process)

    def kill(self) -> None:
        """SIGKILL at once (no graceful shutdown)."""
        kill_process(self.process)


def launch_store_server(
    directory: Path,
    extra_args: tuple[str, ...] = (),
    *,
    database_url: str | None = None,
    admin_key: str | None = None,
) -> RunningStoreServer:
    """Start ``memsync store serve`` on a free loopback port over ``database_url`` (PostgreSQL) or, without
    one, an SQLite file in ``directory`` (which holds the server's log either way)."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = RunningStoreServer(
        url=f"http://127.0.0.1:{port}",
        admin_key=admin_key or "sk-ant-admin-test-" + secrets.token_urlsafe(24),
        db_path=directory / "store.db",
        log_path=directory / "server.log",
        port=port,
        extra_args=extra_args,
        database_url=database_url,
    )
    # A port may be taken between free_port() and bind(); try a few.
    for attempt in range(5):
        try:
            server.start()
            return server
        except RuntimeError:
            if attempt == 4 or "address already in use" not in server.log_text().lower():
                raise
            server.port = free_port()
            server.url = f"http://127.0.0.1:{server.port}"
    raise AssertionError("unreachable")


# --- backends: SQLite everywhere; PostgreSQL too for the modules marked ``both_backends`` -------------------

BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``both_backends`` that use a store server run once per backend."""
    if metafunc.definition.get_closest_marker("both_backends") and "store_backend" in metafunc.fixturenames:
        metafunc.parametrize("store_backend", BACKENDS, indirect=True, scope="session")


@pytest.fixture(scope="session")
def store_backend(request: pytest.FixtureRequest) -> str:
    backend: str = getattr(request, "param", "sqlite")
    return backend


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL cluster per test process (xdist worker), started on first use. Without the binaries
    the tests that need it skip, naming what to install; under CI (``CI`` set) they fail instead, because
    CI installs PostgreSQL and must run them."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        if os.environ.get("CI"):
            pytest.fail(f"{PG_MISSING} (CI must run the PostgreSQL tests)")
        pytest.skip(PG_MISSING)
    server = PostgresServer(bin_dir).start()
    try:
        yield server
    finally:
        server.stop()


def launch_on_backend(
    backend: str, request: pytest.FixtureRequest, directory: Path, extra_args: tuple[str, ...] = ()
) -> RunningStoreServer:
    """``launch_store_server`` on ``backend``: an SQLite file in ``directory``, or a new PostgreSQL
    database."""
    if backend == "postgresql":
        pg: PostgresServer = request.getfixturevalue("postgres")
        return launch_store_server(directory, extra_args, database_url=pg.new_database())
    return launch_store_server(directory, extra_args)


@pytest.fixture(scope="session")
def store_server(
    store_backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningStoreServer]:
    server = launch_on_backend(
        store_backend, request, tmp_path_factory.mktemp(f"store-server-{store_backend}")
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_store_server(
    store_backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningStoreServer]:
    server = launch_on_backend(
        store_backend, request, tmp_path_factory.mktemp(f"fresh-store-server-{store_backend}")
    )
    try:
        yield server
    finally:
        server.stop()


# --- raw HTTP helper for protocol tests (the server's own tests use it; others may too) ---------------------


class StoreApi:
    """A thin synchronous httpx wrapper for protocol-level tests: every request carries the API's headers and
    ``?beta=true``; ``admin`` sends the admin key, ``bearer`` a sessions token, ``anon`` no credential."""

    def __init__(self, server: RunningStoreServer) -> None:
        self.server = server
        self.http = httpx.Client(base_url=server.url, headers=API_HEADERS, timeout=30.0)

    def close(self) -> None:
        self.http.close()

    def _send(self, method: str, path: str, headers: dict[str, str], **kw: Any) -> httpx.Response:
        params = dict(kw.pop("params", None) or {})
        params.setdefault("beta", "true")
        return self.http.request(method, path, params=params, headers=headers, **kw)

    def admin(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self._send(method, path, {"x-api-key": self.server.admin_key, **kw.pop("headers", {})}, **kw)

    def bearer(self, token: str, method: str, path: str, **kw: Any) -> httpx.Response:
        return self._send(method, path, {"authorization": f"Bearer {token}", **kw.pop("headers", {})}, **kw)

    def anon(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self._send(method, path, dict(kw.pop("headers", {})), **kw)

    # conveniences (admin) ----------------------------------------------------------------------------------

    def new_store(self, name: str = "Test Store", **fields: Any) -> str:
        resp = self.admin("POST", "/v1/memory_stores", json={"name": name, **fields})
        assert resp.status_code == 200, resp.text
        store_id: str = resp.json()["id"]
        return store_id

    def create(self, store_id: str, path: str, content: str) -> dict[str, Any]:
        resp = self.admin(
            "POST", f"/v1/memory_stores/{store_id}/memories", json={"path": path, "content": content}
        )
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body

    def list_all(self, store_id: str, **params: Any) -> list[dict[str, Any]]:
        """Every item of a memory listing, following next_page."""
        items: list[dict[str, Any]] = []
        page: str | None = None
        while True:
            query = dict(params)
            if page:
                query["page"] = page
            resp = self.admin("GET", f"/v1/memory_stores/{store_id}/memories", params=query)
            assert resp.status_code == 200, resp.text
            body = resp.json()
            items.extend(body["data"])
            page = body["next_page"]
            if not page:
                return items

    def paths(self, store_id: str) -> list[str]:
        return [item["path"] for item in self.list_all(store_id, limit=100)]

    def session_token(self, stores: list[tuple[str, str]], session_id: str | None = None) -> str:
        """Mint a session; return its raw sessions token (decoded from the work-item secret)."""
        from memsync.api.secret import decode_work_secret

        return decode_work_secret(self.server.mint_secret_sync(stores, session_id)).sessions_token


@pytest.fixture
def store_api(store_server: RunningStoreServer) -> Iterator[StoreApi]:
    api = StoreApi(store_server)
    try:
        yield api
    finally:
        api.close()


# --- the soak test's long mode and its figures in the terminal summary -------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-long",
        action="store_true",
        default=False,
        help="run the randomized soak (tests/soak) with 100,000 operations instead of 10,000",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--soak-long"):
        os.environ["MEMSYNC_SOAK_LONG"] = "1"  # read by tests/soak when it is imported, after this


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each soak's seed and figures, whatever its outcome (they travel in the report, so xdist works)."""
    lines = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for name, figures in getattr(report, "user_properties", []):
                if name == "soak":
                    lines.append(f"{report.nodeid}: {figures}")
    if lines:
        terminalreporter.write_sep("-", "soak figures")
        for line in lines:
            terminalreporter.write_line(line)
