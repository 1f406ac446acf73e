"""The store server's versioned schema, per backend: an ordered list of migrations run on start.

The version a database is at is kept in its ``meta`` table (``schema_version``). On start the server applies
every migration above it, each in the same transaction as the version bump, under the backend's writer lock
(SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a transaction-scoped advisory lock), so replicas that start together
migrate once. A database newer than this code is refused rather than written with an older idea of the schema.

Version 1 is the schema every earlier release created (its statements are idempotent, so a database made
before versioning existed is adopted as version 1). Version 2 adds what conditional listing, expiring and
revocable sessions tokens and named admin keys need; version 3 the self-hosted environments (their keys, the
work queue with its leases, the session event stream).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


# --- SQLite ---------------------------------------------------------------------------------------------

SQLITE: tuple[Migration, ...] = (
    Migration(
        1,
        "stores, memories, versions, sessions",
        (
            """CREATE TABLE IF NOT EXISTS stores (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                name TEXT NOT NULL,
                description TEXT NOT NULL,
                metadata TEXT NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                archived_at TEXT
            )""",
            """CREATE TABLE IF NOT EXISTS memories (
                id TEXT PRIMARY KEY,
                store_id TEXT NOT NULL REFERENCES stores(id) ON DELETE CASCADE,
                path TEXT NOT NULL,
                content TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                size INTEGER NOT NULL,
                version_id TEXT NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                UNIQUE (store_id, path)
            )""",
            """CREATE TABLE IF NOT EXISTS versions (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                store_id TEXT NOT NULL REFERENCES stores(id) ON DELETE CASCADE,
                memory_id TEXT NOT NULL,
                operation TEXT NOT NULL,
                content TEXT,
                sha256 TEXT,
                size INTEGER,
                path TEXT,
                created_at TEXT NOT NULL,
                actor_type TEXT,
                actor_id TEXT,
                redacted_at TEXT,
                redactor_type TEXT,
                redactor_id TEXT
            )""",
            "CREATE INDEX IF NOT EXISTS versions_by_store ON versions (store_id, seq)",
            "CREATE INDEX IF NOT EXISTS versions_by_memory ON versions (store_id, memory_id, seq)",
            """CREATE TABLE IF NOT EXISTS sessions (
                id TEXT PRIMARY KEY,
                token_hash TEXT NOT NULL UNIQUE,
                created_at TEXT NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS session_resources (
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                position INTEGER NOT NULL,
                store_id TEXT NOT NULL,
                name TEXT,
                description TEXT,
                mount_path TEXT,
                access TEXT NOT NULL,
                instructions TEXT,
                PRIMARY KEY (session_id, position)
            )""",
            "CREATE INDEX IF NOT EXISTS session_resources_by_store ON session_resources (store_id)",
        ),
    ),
    Migration(
        2,
        "per-store change counter; sessions token expiry and revocation; named admin keys",
        (
            "ALTER TABLE stores ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE stores ADD COLUMN change_id TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE sessions ADD COLUMN expires_at TEXT",
            "ALTER TABLE sessions ADD COLUMN revoked_at TEXT",
            """CREATE TABLE admin_keys (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                key_hash TEXT NOT NULL UNIQUE,
                created_at TEXT NOT NULL,
                revoked_at TEXT
            )""",
        ),
    ),
    Migration(
        3,
        "self-hosted environments: environments and their keys, the work queue, session events and scripts",
        (
            """CREATE TABLE environments (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                name TEXT NOT NULL,
                description TEXT,
                metadata TEXT NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                archived_at TEXT
            )""",
            """CREATE TABLE environment_keys (
                id TEXT PRIMARY KEY,
                environment_id TEXT NOT NULL REFERENCES environments(id),
                key_hash TEXT NOT NULL UNIQUE,
                created_at TEXT NOT NULL,
                revoked_at TEXT
            )""",
            """CREATE TABLE work_items (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                environment_id TEXT NOT NULL REFERENCES environments(id),
                session_id TEXT NOT NULL,
                secret TEXT,
                metadata TEXT NOT NULL,
                created_at TEXT NOT NULL,
                worker_id TEXT,
                state TEXT NOT NULL,
                lease TEXT NOT NULL
            )""",
            "CREATE INDEX work_items_by_environment ON work_items (environment_id, state, seq)",
            "CREATE INDEX work_items_by_session ON work_items (session_id)",
            """CREATE TABLE session_events (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL,
                id TEXT NOT NULL,
                type TEXT NOT NULL,
                body TEXT NOT NULL
            )""",
            "CREATE INDEX session_events_by_session ON session_events (session_id, seq)",
            """CREATE TABLE session_scripts (
                session_id TEXT PRIMARY KEY,
                script TEXT NOT NULL,
                position INTEGER NOT NULL
            )""",
        ),
    ),
)

# --- PostgreSQL -----------------------------------------------------------------------------------------
# Paths and timestamps compare byte-wise (COLLATE "C"), as SQLite compares them: listings page in code point
# order whatever the database's locale. Content is BYTEA (the exact UTF-8 bytes; TEXT cannot hold U+0000).

POSTGRES: tuple[Migration, ...] = (
    Migration(
        1,
        "stores, memories, versions, sessions",
        (
            """CREATE TABLE IF NOT EXISTS stores (
                seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                name TEXT NOT NULL,
                description TEXT NOT NULL,
                metadata TEXT NOT NULL,
                created_at TEXT COLLATE "C" NOT NULL,
                updated_at TEXT COLLATE "C" NOT NULL,
                archived_at TEXT COLLATE "C"
            )""",
            """CREATE TABLE IF NOT EXISTS memories (
                id TEXT PRIMARY KEY,
                store_id TEXT NOT NULL REFERENCES stores(id) ON DELETE CASCADE,
                path TEXT COLLATE "C" NOT NULL,
                content BYTEA NOT NULL,
                sha256 TEXT NOT NULL,
                size INTEGER NOT NULL,
                version_id TEXT NOT NULL,
                created_at TEXT COLLATE "C" NOT NULL,
                updated_at TEXT COLLATE "C" NOT NULL,
                UNIQUE (store_id, path)
            )""",
            """CREATE TABLE IF NOT EXISTS versions (
                seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                store_id TEXT NOT NULL REFERENCES stores(id) ON DELETE CASCADE,
                memory_id TEXT NOT NULL,
                operation TEXT NOT NULL,
                content BYTEA,
                sha256 TEXT,
                size INTEGER,
                path TEXT COLLATE "C",
                created_at TEXT COLLATE "C" NOT NULL,
                actor_type TEXT,
                actor_id TEXT,
                redacted_at TEXT COLLATE "C",
                redactor_type TEXT,
                redactor_id TEXT
            )""",
            "CREATE INDEX IF NOT EXISTS versions_by_store ON versions (store_id, seq)",
            "CREATE INDEX IF NOT EXISTS versions_by_memory ON versions (store_id, memory_id, seq)",
            """CREATE TABLE IF NOT EXISTS sessions (
                id TEXT PRIMARY KEY,
                token_hash TEXT NOT NULL UNIQUE,
                created_at TEXT COLLATE "C" NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS session_resources (
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                position INTEGER NOT NULL,
                store_id TEXT NOT NULL,
                name TEXT,
                description TEXT,
                mount_path TEXT,
                access TEXT NOT NULL,
                instructions TEXT,
                PRIMARY KEY (session_id, position)
            )""",
            "CREATE INDEX IF NOT EXISTS session_resources_by_store ON session_resources (store_id)",
        ),
    ),
    Migration(
        2,
        "per-store change counter; sessions token expiry and revocation; named admin keys",
        (
            "ALTER TABLE stores ADD COLUMN change_seq BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE stores ADD COLUMN change_id TEXT NOT NULL DEFAULT ''",
            'ALTER TABLE sessions ADD COLUMN expires_at TEXT COLLATE "C"',
            'ALTER TABLE sessions ADD COLUMN revoked_at TEXT COLLATE "C"',
            """CREATE TABLE admin_keys (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                key_hash TEXT NOT NULL UNIQUE,
                created_at TEXT COLLATE "C" NOT NULL,
                revoked_at TEXT COLLATE "C"
            )""",
        ),
    ),
    Migration(
        3,
        "self-hosted environments: environments and their keys, the work queue, session events and scripts",
        (
            """CREATE TABLE environments (
                seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                name TEXT NOT NULL,
                description TEXT,
                metadata TEXT NOT NULL,
                created_at TEXT COLLATE "C" NOT NULL,
                updated_at TEXT COLLATE "C" NOT NULL,
                archived_at TEXT COLLATE "C"
            )""",
            """CREATE TABLE environment_keys (
                id TEXT PRIMARY KEY,
                environment_id TEXT NOT NULL REFERENCES environments(id),
                key_hash TEXT NOT NULL UNIQUE,
                created_at TEXT COLLATE "C" NOT NULL,
                revoked_at TEXT COLLATE "C"
            )""",
            """CREATE TABLE work_items (
                seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                environment_id TEXT NOT NULL REFERENCES environments(id),
                session_id TEXT NOT NULL,
                secret TEXT,
                metadata TEXT NOT NULL,
                created_at TEXT COLLATE "C" NOT NULL,
                worker_id TEXT,
                state TEXT NOT NULL,
                lease TEXT NOT NULL
            )""",
            "CREATE INDEX work_items_by_environment ON work_items (environment_id, state, seq)",
            "CREATE INDEX work_items_by_session ON work_items (session_id)",
            """CREATE TABLE session_events (
                seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                session_id TEXT NOT NULL,
                id TEXT NOT NULL,
                type TEXT NOT NULL,
                body TEXT NOT NULL
            )""",
            "CREATE INDEX session_events_by_session ON session_events (session_id, seq)",
            """CREATE TABLE session_scripts (
                session_id TEXT PRIMARY KEY,
                script TEXT NOT NULL,
                position INTEGER NOT NULL
            )""",
        ),
    ),
)

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
