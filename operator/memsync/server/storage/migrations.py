"""The store server's versioned schema: the one schema (``schema``) as each backend's ordered migrations.

The version a database is at is kept in its ``meta`` table (``schema_version``). On start the server applies
every migration above it, each in the same transaction as the version bump, under the backend's writer lock
(SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a transaction-scoped advisory lock), so replicas that start together
migrate once. A database newer than this code is refused rather than written with an older idea of the schema.

Version 1 is the schema every earlier release created (its statements are idempotent, so a database made
before versioning existed is adopted as version 1). Version 2 adds what conditional listing, expiring and
revocable sessions tokens and named admin keys need; version 3 the self-hosted environments (their keys, the
work queue with its leases, the session event stream); version 4 PostgreSQL's announcements of changed stores
(nothing on SQLite, whose version still moves to 4 so both backends count the same); version 5 the store
browser's viewer keys and sign-in sessions.
"""

from __future__ import annotations

from dataclasses import dataclass

from memsync.server.storage import schema
from memsync.server.storage.schema import SCHEMA, Dialect


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


def for_dialect(dialect: Dialect) -> tuple[Migration, ...]:
    """The schema's steps as one backend's migrations (the same versions for every backend)."""
    return tuple(
        Migration(
            step.version,
            step.description,
            tuple(dialect.render(t) for t in step.templates)
            + (step.postgresql if dialect.name == schema.POSTGRES.name else ()),
        )
        for step in SCHEMA
    )


SQLITE: tuple[Migration, ...] = for_dialect(schema.SQLITE)
POSTGRES: tuple[Migration, ...] = for_dialect(schema.POSTGRES)

META_TABLE = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
SCHEMA_VERSION_KEY = "schema_version"


def latest(migrations: tuple[Migration, ...]) -> int:
    return migrations[-1].version


def pending(migrations: tuple[Migration, ...], current: int) -> list[Migration]:
    """The migrations above ``current``, in order; a database newer than the code is an error."""
    top = latest(migrations)
    if current > top:
        raise RuntimeError(
            f"the database's schema is version {current}, newer than this server's {top}: "
            "run a memsync release at least as new as the one that last wrote it"
        )
    return [m for m in migrations if m.version > current]
