"""The store server's ASGI app: the database, the services over it and their HTTP routers, assembled.

Endpoints are plain ``def`` functions, so FastAPI runs them in its threadpool and database work never blocks
the event loop. Request bodies are read by an async dependency that enforces the size cap while streaming
(``http/envelope.py``).

The app's OpenAPI document is ``app.openapi()`` (``http/openapi.py``); with ``ui`` (the default) the app also
serves the store browser at ``/ui/`` and the API reference at ``/docs`` and ``/openapi.json`` (``ui/``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypedDict, Unpack

from fastapi import Depends, FastAPI

from memsync.server.access import DEFAULT_SESSION_TOKEN_TTL_S, AccessService
from memsync.server.environments.extension import EnvironmentExtension
from memsync.server.environments.rules import DEFAULT_FIRST_HEARTBEAT_S
from memsync.server.environments.work import DEFAULT_LEASE_TTL_S
from memsync.server.http import access as access_routes
from memsync.server.http import environments as environment_routes
from memsync.server.http import memories as memory_routes
from memsync.server.http import observe
from memsync.server.http import openapi as openapi_document
from memsync.server.http import sessions as session_routes
from memsync.server.http import stores as store_routes
from memsync.server.http import versions as version_routes
from memsync.server.http import work as work_routes
from memsync.server.http.admission import AdmissionLimits, AdmissionMiddleware
from memsync.server.http.deps import ids_in_path, one_value_per_query_parameter
from memsync.server.http.envelope import RequestIdMiddleware, install_error_handlers, scope_error_response
from memsync.server.http.probe import ProbeAnswers, ProbeMiddleware, listing_route
from memsync.server.storage.backends import open_database
from memsync.server.stores.service import StoreService
from memsync.server.ui import BrowserHeadersMiddleware
from memsync.server.ui import install as install_browser

logger = logging.getLogger("memsync.server")


class AppSettings(TypedDict, total=False):
    """The server's tunables (each has a default): see ``memsync store serve --help`` for what each means."""

    admin_key_name: str
    cursor_ttl_s: int
    max_memories_per_store: int | None
    session_token_ttl_s: int
    lease_ttl_s: int
    first_heartbeat_s: int
    db_pool_size: int
    ui: bool


def create_app(
    database: Path | str,
    admin_key: str,
    public_url: str,
    *,
    access_logs: bool = True,
    admission: AdmissionLimits | None = None,
    **settings: Unpack[AppSettings],
) -> FastAPI:
    """The store server as an ASGI app over ``database``: an SQLite file path or a ``postgresql://`` URL.

    ``admission`` bounds the requests each process serves at once (``http/admission.py``)."""
    db = open_database(database, pool_max=settings.get("db_pool_size", 10))
    kwargs: dict[str, Any] = {"cursor_ttl_s": settings.get("cursor_ttl_s", 3600)}
    max_memories_per_store = settings.get("max_memories_per_store")
    if max_memories_per_store is not None:
        kwargs["max_memories_per_store"] = max_memories_per_store
    try:
        access = AccessService(
            db,
            admin_key,
            public_url,
            admin_key_name=settings.get("admin_key_name", "default"),
            session_token_ttl_s=settings.get("session_token_ttl_s", DEFAULT_SESSION_TOKEN_TTL_S),
        )
    except BaseException:
        db.close()
        raise
    service = StoreService(db, **kwargs)
    extension = EnvironmentExtension.attach(
        db,
        access,
        lease_ttl_s=settings.get("lease_ttl_s", DEFAULT_LEASE_TTL_S),
        first_heartbeat_s=settings.get("first_heartbeat_s", DEFAULT_FIRST_HEARTBEAT_S),
    )

    memories = memory_routes.router(service)
    probes = ProbeAnswers(
        route=listing_route(memories), service=service, access=access, access_logs=access_logs
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        logger.info(
            "store server ready",
            extra={"db": db.describe(), "schema_version": db.schema_version, "public_url": access.public_url},
        )
        probes.serve_on(asyncio.get_running_loop())  # the HTTP protocol answers the probes it can at once
        yield
        probes.serve_on(None)
        db.close()
        logger.info("store server stopped")

    app = FastAPI(
        title="memsync store server",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # The server reports through its Prometheus metrics and structured logs (docs/store-server.md);
        # FastAPI's own OpenTelemetry hook would look for providers on every request (a few microseconds of
        # the sidecars' probe, whose whole answer costs tens).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.service = service
    app.state.access = access
    app.state.environments = extension.envs
    # innermost: the sidecars' conditional probe answered without the router (http/probe.py), gated when it
    # reaches the app (one answered at hand by the HTTP protocol takes no slot: it ends before another starts)
    app.add_middleware(ProbeMiddleware, answers=probes)
    # inside the next two: a shed request is still counted, timed and logged, and has its request id
    app.add_middleware(
        AdmissionMiddleware, limits=admission or AdmissionLimits.derived(), render=scope_error_response
    )
    app.add_middleware(observe.ObserveMiddleware, access_logs=access_logs)
    app.add_middleware(RequestIdMiddleware)  # outermost but one, so the access log has the request id
    if settings.get("ui", True):
        app.add_middleware(BrowserHeadersMiddleware)  # outermost: every browser answer has its headers
    install_error_handlers(app)
    for router in (
        environment_routes.router(extension.envs),
        work_routes.router(extension.work),
        session_routes.router(extension),
        observe.router(db),
        store_routes.router(service),
        memories,
        version_routes.router(service),
        access_routes.router(access),
    ):
        app.include_router(
            router, dependencies=[Depends(ids_in_path), Depends(one_value_per_query_parameter)]
        )
    openapi_document.install(app)
    if settings.get("ui", True):
        install_browser(app, service, access)
    return app
