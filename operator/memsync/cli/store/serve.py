"""``memsync store serve``: run the store server.

The only store command that loads the server (FastAPI, uvicorn): the admin commands talk to it over HTTP.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import uvicorn
from fastapi import FastAPI

from memsync.api.constants import MAX_MEMORIES_PER_STORE
from memsync.cli.failures import CliError, ExitCode
from memsync.cli.store.admin import ADMIN_KEY_ENV, load_or_create_key_file, read_key_file
from memsync.cli.store.backup import db_option
from memsync.cli.store.serve_checks import (
    MIN_ADMIN_KEY_LENGTH,
    check_database,
    check_public_url,
    long_enough,
)
from memsync.server.access import DEFAULT_SESSION_TOKEN_TTL_S, MAX_SESSION_TOKEN_TTL_S
from memsync.server.environments.rules import DEFAULT_FIRST_HEARTBEAT_S
from memsync.server.environments.work import DEFAULT_LEASE_TTL_S, LEASE_TTL_MAX_S, LEASE_TTL_MIN_S
from memsync.server.http.admission import DEFAULT_MAX_IN_FLIGHT
from memsync.server.http.loop_lag import DEFAULT_MAX_LAG_S
from memsync.server.http.observe import MULTIPROC_ENV
from memsync.server.listen import ListenError, bind
from memsync.server.protocol import DEFAULT_READ_TIMEOUT_S, uvicorn_config
from memsync.server.storage.backends import is_postgres
from memsync.server.worker import (
    FACTORY,
    SETTINGS_ENV,
    ServeSettings,
    build_app,
    settle_heap,
    worker_run_kwargs,
)

logger = logging.getLogger("memsync.store")

# --- serve ----------------------------------------------------------------------------------------------


def _derived_bound(
    flag: str, envvar: str, minimum: int, help_text: str
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """An admission bound whose default the server derives from ``--max-in-flight`` (None: not given)."""
    return click.option(
        flag, type=click.IntRange(minimum, 10_000), envvar=envvar, show_envvar=True, help=help_text
    )


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="MEMSYNC_STORE_HOST", show_envvar=True)
@click.option(
    "--port",
    default=8700,
    show_default=True,
    type=click.IntRange(0, 65535),
    envvar="MEMSYNC_STORE_PORT",
    show_envvar=True,
)
@db_option(required=False)
@click.option(
    "--public-url",
    envvar="MEMSYNC_PUBLIC_URL",
    show_envvar=True,
    help="URL clients reach this server at; put into minted work secrets. Default http://HOST:PORT; "
    "required when HOST is a wildcard address (0.0.0.0, ::), which no client can reach.",
)
@click.option(
    "--admin-key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="MEMSYNC_ADMIN_KEY_FILE",
    show_envvar=True,
    help=f"File holding the admin key (at least {MIN_ADMIN_KEY_LENGTH} characters). Default: "
    f"${ADMIN_KEY_ENV}, else (SQLite) a key generated into DB.admin-key.",
)
@click.option(
    "--admin-key-name",
    default="default",
    show_default=True,
    envvar="MEMSYNC_ADMIN_KEY_NAME",
    show_envvar=True,
    help="Name the configured admin key is entered under (on first start); more keys: 'memsync store "
    "admin-key'.",
)
@click.option(
    "--cursor-ttl",
    default=3600,
    show_default=True,
    type=click.IntRange(1),
    envvar="MEMSYNC_CURSOR_TTL",
    show_envvar=True,
    help="Seconds a page cursor stays valid.",
)
@click.option(
    "--max-memories",
    default=MAX_MEMORIES_PER_STORE,
    show_default=True,
    type=click.IntRange(1),
    envvar="MEMSYNC_MAX_MEMORIES_PER_STORE",
    show_envvar=True,
    help="Memories per store (the hosted API allows 10,000; lower it to test the cap).",
)
@click.option(
    "--session-token-ttl",
    default=DEFAULT_SESSION_TOKEN_TTL_S,
    show_default=True,
    type=click.IntRange(1, MAX_SESSION_TOKEN_TTL_S),
    envvar="MEMSYNC_SESSION_TOKEN_TTL",
    show_envvar=True,
    help="Seconds a minted sessions token stays valid (a mint may ask for another lifetime).",
)
@click.option(
    "--lease-ttl",
    default=DEFAULT_LEASE_TTL_S,
    show_default=True,
    type=click.IntRange(LEASE_TTL_MIN_S, LEASE_TTL_MAX_S),
    envvar="MEMSYNC_LEASE_TTL",
    show_envvar=True,
    help="Seconds a work item's lease lasts without a heartbeat (self-hosted environments).",
)
@click.option(
    "--first-heartbeat-window",
    default=DEFAULT_FIRST_HEARTBEAT_S,
    show_default=True,
    type=click.IntRange(1, LEASE_TTL_MAX_S),
    envvar="MEMSYNC_FIRST_HEARTBEAT_WINDOW",
    show_envvar=True,
    help="Seconds an acknowledged work item waits for its first heartbeat before it is queued again.",
)
@click.option(
    "--request-read-timeout",
    default=DEFAULT_READ_TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    envvar="MEMSYNC_REQUEST_READ_TIMEOUT",
    show_envvar=True,
    help="Seconds a request (headers and body) may take to arrive; slower connections are dropped.",
)
@click.option(
    "--db-pool-size",
    default=10,
    show_default=True,
    type=click.IntRange(1, 200),
    envvar="MEMSYNC_DB_POOL_SIZE",
    show_envvar=True,
    help="PostgreSQL connections per server process.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    envvar="MEMSYNC_STORE_WORKERS",
    show_envvar=True,
    help="Server processes sharing the port (each with its own connections to the database).",
)
@click.option(
    "--http",
    "http_impl",
    default="httptools",
    show_default=True,
    type=click.Choice(["httptools", "h11"]),
    envvar="MEMSYNC_STORE_HTTP",
    show_envvar=True,
    help="HTTP/1.1 parser: httptools (C) or h11 (pure Python).",
)
@click.option(
    "--ssl-certfile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="MEMSYNC_STORE_SSL_CERTFILE",
    show_envvar=True,
    help="Serve HTTPS with this PEM certificate (chain); or terminate TLS at the ingress.",
)
@click.option(
    "--ssl-keyfile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="MEMSYNC_STORE_SSL_KEYFILE",
    show_envvar=True,
    help="The certificate's PEM private key.",
)
@click.option(
    "--max-in-flight",
    default=DEFAULT_MAX_IN_FLIGHT,
    show_default=True,
    type=click.IntRange(0, 10_000),
    envvar="MEMSYNC_STORE_MAX_IN_FLIGHT",
    show_envvar=True,
    help="Requests each server process serves at once; more wait in a small queue, then are answered 503 "
    "with Retry-After at once (0: no bound). /healthz and /metrics are never refused.",
)
@_derived_bound(
    "--max-queued",
    "MEMSYNC_STORE_MAX_QUEUED",
    0,
    "Requests each server process lets wait for a slot before it sheds. Default: a quarter of "
    "--max-in-flight.",
)
@_derived_bound(
    "--max-in-flight-per-credential",
    "MEMSYNC_STORE_MAX_IN_FLIGHT_PER_CREDENTIAL",
    1,
    "Requests one credential may have in flight or queued per process while others wait for a slot; more "
    "are answered 429 with Retry-After (idle slots serve any caller). Default: half of --max-in-flight.",
)
@click.option(
    "--max-loop-lag",
    default=DEFAULT_MAX_LAG_S,
    show_default=True,
    type=click.FloatRange(min=0),
    envvar="MEMSYNC_STORE_MAX_LOOP_LAG",
    show_envvar=True,
    help="Seconds a server process's event loop may run late, busy, before new requests are answered 503 "
    "with Retry-After at once (0: never). /healthz and /metrics are never refused.",
)
@click.option(
    "--access-log/--no-access-log",
    default=True,
    show_default=True,
    envvar="MEMSYNC_STORE_ACCESS_LOG",
    show_envvar=True,
    help="One structured INFO line per request (no headers, no query strings).",
)
@click.option(
    "--ui/--no-ui",
    default=True,
    show_default=True,
    envvar="MEMSYNC_STORE_UI",
    show_envvar=True,
    help="Serve the store browser (/ui/) and the API reference (/docs, /openapi.json), signed in with an "
    "admin key or a viewer key.",
)
@click.pass_context
def serve(  # noqa: PLR0913 - click passes each of the command's options as a parameter
    ctx: click.Context,
    *,
    host: str,
    port: int,
    database: str,
    public_url: str | None,
    admin_key_file: Path | None,
    admin_key_name: str,
    cursor_ttl: int,
    max_memories: int,
    lease_ttl: int,
    first_heartbeat_window: int,
    session_token_ttl: int,
    request_read_timeout: float,
    db_pool_size: int,
    workers: int,
    http_impl: str,
    ssl_certfile: Path | None,
    ssl_keyfile: Path | None,
    access_log: bool,
    max_in_flight: int,
    max_queued: int | None,
    max_in_flight_per_credential: int | None,
    max_loop_lag: float,
    ui: bool,
) -> None:
    """Run the store server (FastAPI + uvicorn over an SQLite file or PostgreSQL)."""
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together")
    # What can be checked without writing anything is checked first: no stray key file beside a wrong --db.
    check_public_url(host, public_url)
    check_database(database)
    # The address first: a port in use is said before the database is touched or anything says "ready".
    try:
        sock = bind(host, port)
    except ListenError as exc:
        raise CliError(str(exc)) from exc
    if workers == 1:
        port = sock.getsockname()[1]  # --port 0: the one the kernel chose
    else:
        sock.close()  # uvicorn's supervisor binds it again for its workers
    admin_key = resolve_admin_key(admin_key_file, database)
    scheme = "https" if ssl_certfile is not None else "http"
    settings = ServeSettings(
        database=database,
        public_url=public_url or f"{scheme}://{host}:{port}",
        admin_key_name=admin_key_name,
        cursor_ttl_s=cursor_ttl,
        max_memories_per_store=max_memories,
        session_token_ttl_s=session_token_ttl,
        lease_ttl_s=lease_ttl,
        first_heartbeat_s=first_heartbeat_window,
        db_pool_size=db_pool_size,
        read_timeout_s=request_read_timeout,
        http=http_impl,
        access_logs=access_log,
        max_in_flight=max_in_flight,
        max_queued=max_queued,
        max_in_flight_per_credential=max_in_flight_per_credential,
        max_loop_lag_s=max_loop_lag,
        ui=ui,
        log_level=logging.getLevelName(logging.getLogger().getEffectiveLevel()),
        log_format=_root_params(ctx).get("log_format") or "text",
    )
    tls: dict[str, Any] = {}
    if ssl_certfile is not None:
        tls = {"ssl_certfile": str(ssl_certfile), "ssl_keyfile": str(ssl_keyfile)}
    try:
        # Built here even with several workers: the schema is migrated and the admin key entered once,
        # and a bad setting fails before any worker starts.
        app = build_app(settings, admin_key)
    except ValueError as exc:  # a setting the server refuses
        raise CliError(str(exc), ExitCode.USAGE) from None
    except sqlite3.DatabaseError as exc:
        raise CliError(f"--db {database!r}: not a usable SQLite database: {exc}", ExitCode.USAGE) from None
    run_server(app, settings, admin_key=admin_key, sock=sock, address=(host, port), workers=workers, tls=tls)


def _root_params(ctx: click.Context) -> dict[str, Any]:
    return dict(ctx.find_root().params)


def resolve_admin_key(admin_key_file: Path | None, database: str) -> str:
    """The admin key: from the file, else ``MEMSYNC_ADMIN_KEY``, else (SQLite only) the key file beside the
    database, generated on first use."""
    if admin_key_file is not None:
        return long_enough(read_key_file(admin_key_file), f"--admin-key-file {admin_key_file}")
    if os.environ.get(ADMIN_KEY_ENV, "").strip():
        return long_enough(os.environ[ADMIN_KEY_ENV].strip(), ADMIN_KEY_ENV)
    if is_postgres(database):
        raise click.UsageError(f"no admin key: on PostgreSQL set {ADMIN_KEY_ENV} or pass --admin-key-file")
    db_path = Path(database)
    key_path = db_path.with_name(db_path.name + ".admin-key")
    admin_key, created = load_or_create_key_file(key_path)
    logger.info(
        "generated a new admin key" if created else "using the admin key file",
        extra={"admin_key_file": str(key_path)},
    )
    return admin_key


def run_server(
    app: FastAPI,
    settings: ServeSettings,
    *,
    admin_key: str,
    sock: socket.socket,
    address: tuple[str, int],
    workers: int,
    tls: dict[str, Any],
) -> None:
    """Serve ``app`` on the bound ``sock`` in this process, or start ``workers`` processes (each builds its
    own app from ``settings``)."""
    host, port = address
    if workers == 1:
        config = uvicorn_config(
            app,
            host=host,
            port=port,
            read_timeout_s=settings.read_timeout_s,
            http=settings.http,
            max_loop_lag_s=settings.max_loop_lag_s,
            **tls,
        )
        logger.info("store server listening", extra={"host": host, "port": port, "workers": workers})
        settle_heap()
        try:
            uvicorn.Server(config).run(sockets=[sock])
        except KeyboardInterrupt:
            # uvicorn shut down cleanly on Ctrl-C, then raised SIGINT again: a stop, not an abort
            pass
        return
    logger.info("store server starting its workers", extra={"host": host, "port": port, "workers": workers})
    app.state.service.db.close()  # each worker opens its own
    os.environ[SETTINGS_ENV] = settings.to_env()
    # the workers share their metrics through files in a directory of this run (/metrics sums them)
    os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="memsync-store-metrics-")
    os.environ[ADMIN_KEY_ENV] = admin_key
    uvicorn.run(FACTORY, host=host, port=port, **worker_run_kwargs(settings, workers), **tls)
