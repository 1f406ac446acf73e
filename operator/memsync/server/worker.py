"""How ``memsync store serve`` starts the app: in its own process, or in each of several uvicorn workers.

``ServeSettings`` is the one contract between ``serve`` and its worker processes: ``serve`` writes it as JSON
into ``SETTINGS_ENV`` (the admin key travels separately, in ``MEMSYNC_ADMIN_KEY``, never in the settings),
and each worker rebuilds the app from it with ``app_from_env`` (an import-string factory, which is what
uvicorn needs to start workers).
"""

from __future__ import annotations

import gc
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from memsync.api.constants import SERVER_IDLE_KEEPALIVE_S
from memsync.logs import configure_logging
from memsync.server.accept import LOOP_FACTORY
from memsync.server.app import create_app
from memsync.server.environments.rules import DEFAULT_FIRST_HEARTBEAT_S
from memsync.server.environments.work import DEFAULT_LEASE_TTL_S
from memsync.server.http.admission import DEFAULT_MAX_IN_FLIGHT, AdmissionLimits
from memsync.server.http.loop_lag import DEFAULT_MAX_LAG_S
from memsync.server.protocol import HTTP_IMPLEMENTATIONS

SETTINGS_ENV = "MEMSYNC_STORE_WORKER_SETTINGS"
ADMIN_KEY_ENV = "MEMSYNC_ADMIN_KEY"
FACTORY = "memsync.server.worker:app_from_env"


@dataclass(frozen=True)
class ServeSettings:
    database: str
    public_url: str
    admin_key_name: str
    cursor_ttl_s: int
    max_memories_per_store: int
    session_token_ttl_s: int
    db_pool_size: int
    read_timeout_s: float
    http: str
    lease_ttl_s: int = DEFAULT_LEASE_TTL_S
    first_heartbeat_s: int = DEFAULT_FIRST_HEARTBEAT_S
    access_logs: bool = True
    log_level: str = "INFO"
    log_format: str = "text"
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_queued: int | None = None
    max_in_flight_per_credential: int | None = None
    max_loop_lag_s: float = DEFAULT_MAX_LAG_S
    ui: bool = True

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str) -> ServeSettings:
        return cls(**json.loads(text))


def build_app(settings: ServeSettings, admin_key: str) -> FastAPI:
    return create_app(
        Path(settings.database) if "://" not in settings.database else settings.database,
        admin_key,
        settings.public_url,
        admin_key_name=settings.admin_key_name,
        cursor_ttl_s=settings.cursor_ttl_s,
        max_memories_per_store=settings.max_memories_per_store,
        session_token_ttl_s=settings.session_token_ttl_s,
        lease_ttl_s=settings.lease_ttl_s,
        first_heartbeat_s=settings.first_heartbeat_s,
        db_pool_size=settings.db_pool_size,
        access_logs=settings.access_logs,
        ui=settings.ui,
        admission=AdmissionLimits.derived(
            settings.max_in_flight,
            max_queued=settings.max_queued,
            per_credential=settings.max_in_flight_per_credential,
        ),
    )


def protocol_import_path(http: str) -> str:
    cls = HTTP_IMPLEMENTATIONS[http]
    return f"{cls.__module__}:{cls.__qualname__}"


def app_from_env() -> FastAPI:
    """The app in a worker process (uvicorn calls this once per worker)."""
    settings = ServeSettings.from_env(os.environ[SETTINGS_ENV])
    configure_logging(settings.log_level, settings.log_format)  # type: ignore[arg-type]
    HTTP_IMPLEMENTATIONS[settings.http].read_timeout_s = settings.read_timeout_s
    HTTP_IMPLEMENTATIONS[settings.http].max_loop_lag_s = settings.max_loop_lag_s  # httptools reads it
    app = build_app(settings, os.environ[ADMIN_KEY_ENV])
    settle_heap()
    return app


def settle_heap() -> None:
    """What a serving process built to start (modules, classes, routes, the app) lives as long as it does:
    moved out of the garbage collector's reach (``gc.freeze``), a full collection no longer walks it. Before,
    one took about 50 ms on the development machine, on whichever thread allocated, often the event loop,
    which then answered nothing (and, late and busy, refused requests: ``http.loop_lag``)."""
    gc.collect()
    gc.freeze()


def worker_run_kwargs(settings: ServeSettings, workers: int) -> dict[str, Any]:
    """``uvicorn.run`` arguments for several workers (the app by import string, the protocol likewise)."""
    return {
        "factory": True,
        "workers": workers,
        "http": protocol_import_path(settings.http),
        "loop": LOOP_FACTORY,  # uvloop, accepting every waiting connection at once (``accept``)
        "log_config": None,
        "access_log": False,
        "log_level": "warning",
        "timeout_keep_alive": SERVER_IDLE_KEEPALIVE_S,
    }
