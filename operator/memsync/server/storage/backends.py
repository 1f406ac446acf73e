"""Choose and open the store server's database from one setting: a PostgreSQL URL or an SQLite file path."""

from __future__ import annotations

from pathlib import Path

from memsync.server.storage.database import Database
from memsync.server.storage.sqlite import SqliteDatabase

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(spec: str | Path) -> bool:
    return isinstance(spec, str) and spec.startswith(POSTGRES_SCHEMES)


def open_database(spec: str | Path, *, pool_max: int = 10) -> Database:
    """``postgresql://user@host:port/db`` (libpq URL; the password may come from PGPASSWORD or a passfile)
    opens PostgreSQL; anything else is an SQLite file path (created if missing). Migrations run here."""
    if is_postgres(spec):
        from memsync.server.storage.postgres import PgDatabase  # noqa: PLC0415 - psycopg loads only when used

        return PgDatabase(str(spec), pool_max=pool_max)
    return SqliteDatabase(spec)
