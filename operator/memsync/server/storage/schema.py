"""The store server's schema, written once for both backends, and the column types where they differ.

Every table and index is defined here as a template over four column kinds; a :class:`Dialect` names the
type each backend uses for them. That is the whole difference between the two backends' DDL:

- ``{serial}``: the ``seq`` key that orders rows in insertion order;
- ``{ordered}``: text that listings sort and page on (paths, timestamps). PostgreSQL compares it byte-wise
  (``COLLATE "C"``), as SQLite does, so listings page in code point order whatever the database's locale;
- ``{content}``: a memory's content. PostgreSQL keeps the exact UTF-8 bytes (``BYTEA``; its TEXT cannot hold
  U+0000);
- ``{counter}``: a 64-bit counter (SQLite's INTEGER already is one).

The statements are kept exactly as the earlier releases issued them (``tests/unit/test_server_schema.py``
compares the rendered DDL with theirs), so a database created by any of them opens and upgrades.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    """The column types one backend uses for the schema's four column kinds."""

    name: str
    serial: str
    ordered: str
    content: str
    counter: str

    def render(self, template: str) -> str:
        return template.format(
            serial=self.serial, ordered=self.ordered, content=self.content, counter=self.counter
        )


SQLITE = Dialect(
    name="sqlite",
    serial="INTEGER PRIMARY KEY AUTOINCREMENT",
    ordered="TEXT",
    content="TEXT",
    counter="INTEGER",
)
POSTGRES = Dialect(
    name="postgresql",
    serial="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    ordered='TEXT COLLATE "C"',
    content="BYTEA",
    counter="BIGINT",
)


@dataclass(frozen=True)
class SchemaStep:
    """One schema version: what it adds, as templates (see the module docstring)."""

    version: int
    description: str
    templates: tuple[str, ...]
    #: Statements for PostgreSQL alone, run after the templates (not rendered: they use no column kind).
    postgresql: tuple[str, ...] = ()


# Version 1 is the schema every release before versioning created: its statements are idempotent (IF NOT
# EXISTS), so a database made then is adopted as version 1.
_V1 = SchemaStep(
    1,
    "stores, memories, versions, sessions",
    (
        """CREATE TABLE IF NOT EXISTS stores (
                seq {serial},
                id TEXT NOT NULL UNIQUE,
                name TEXT NOT NULL,
                description TEXT NOT NULL,
                metadata TEXT NOT NULL,
                created_at {ordered} NOT NULL,
                updated_at {ordered} NOT NULL,
                archived_at {ordered}
            )""",
        """CREATE TABLE IF NOT EXISTS memories (
                id TEXT PRIMARY KEY,
                store_id TEXT NOT NULL REFERENCES stores(id) ON DELETE CASCADE,
                path {ordered} NOT NULL,
                content {content} NOT NULL,
                sha256 TEXT NOT NULL,
                size INTEGER NOT NULL,
                version_id TEXT NOT NULL,
                created_at {ordered} NOT NULL,
                updated_at {ordered} NOT NULL,
                UNIQUE (store_id, path)
            )""",
        """CREATE TABLE IF NOT EXISTS versions (
                seq {serial},
                id TEXT NOT NULL UNIQUE,
                store_id TEXT NOT NULL REFERENCES stores(id) ON DELETE CASCADE,
                memory_id TEXT NOT NULL,
                operation TEXT NOT NULL,
                content {content},
                sha256 TEXT,
                size INTEGER,
                path {ordered},
                created_at {ordered} NOT NULL,
                actor_type TEXT,
                actor_id TEXT,
                redacted_at {ordered},
                redactor_type TEXT,
                redactor_id TEXT
            )""",
        "CREATE INDEX IF NOT EXISTS versions_by_store ON versions (store_id, seq)",
        "CREATE INDEX IF NOT EXISTS versions_by_memory ON versions (store_id, memory_id, seq)",
        """CREATE TABLE IF NOT EXISTS sessions (
                id TEXT PRIMARY KEY,
                token_hash TEXT NOT NULL UNIQUE,
                created_at {ordered} NOT NULL
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
)

_V2 = SchemaStep(
    2,
    "per-store change counter; sessions token expiry and revocation; named admin keys",
    (
        "ALTER TABLE stores ADD COLUMN change_seq {counter} NOT NULL DEFAULT 0",
        "ALTER TABLE stores ADD COLUMN change_id TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE sessions ADD COLUMN expires_at {ordered}",
        "ALTER TABLE sessions ADD COLUMN revoked_at {ordered}",
        """CREATE TABLE admin_keys (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                key_hash TEXT NOT NULL UNIQUE,
                created_at {ordered} NOT NULL,
                revoked_at {ordered}
            )""",
    ),
)

_V3 = SchemaStep(
    3,
    "self-hosted environments: environments and their keys, the work queue, session events and scripts",
    (
        """CREATE TABLE environments (
                seq {serial},
                id TEXT NOT NULL UNIQUE,
                name TEXT NOT NULL,
                description TEXT,
                metadata TEXT NOT NULL,
                created_at {ordered} NOT NULL,
                updated_at {ordered} NOT NULL,
                archived_at {ordered}
            )""",
        """CREATE TABLE environment_keys (
                id TEXT PRIMARY KEY,
                environment_id TEXT NOT NULL REFERENCES environments(id),
                key_hash TEXT NOT NULL UNIQUE,
                created_at {ordered} NOT NULL,
                revoked_at {ordered}
            )""",
        """CREATE TABLE work_items (
                seq {serial},
                id TEXT NOT NULL UNIQUE,
                environment_id TEXT NOT NULL REFERENCES environments(id),
                session_id TEXT NOT NULL,
                secret TEXT,
                metadata TEXT NOT NULL,
                created_at {ordered} NOT NULL,
                worker_id TEXT,
                state TEXT NOT NULL,
                lease TEXT NOT NULL
            )""",
        "CREATE INDEX work_items_by_environment ON work_items (environment_id, state, seq)",
        "CREATE INDEX work_items_by_session ON work_items (session_id)",
        """CREATE TABLE session_events (
                seq {serial},
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
)

# Version 4: PostgreSQL announces every change of a store's change marker, and every deletion of a store,
# to the server processes listening (``pg_changes``), which answer sidecars' probes from memory while they
# hear them. SQLite has nothing to add (its reads never leave the process).
_V4 = SchemaStep(
    4,
    "PostgreSQL: stores announce their changes (NOTIFY memsync_store_change)",
    (),
    postgresql=(
        """CREATE FUNCTION memsync_store_changed() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('memsync_store_change', OLD.id);
                RETURN NULL;
            END
            $$""",
        """CREATE FUNCTION memsync_stores_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('memsync_store_change', '');
                RETURN NULL;
            END
            $$""",
        """CREATE TRIGGER stores_changed AFTER UPDATE OF change_seq, change_id OR DELETE ON stores
            FOR EACH ROW EXECUTE FUNCTION memsync_store_changed()""",
        """CREATE TRIGGER stores_truncated AFTER TRUNCATE ON stores
            FOR EACH STATEMENT EXECUTE FUNCTION memsync_stores_truncated()""",
    ),
)

# Version 5: the store browser (``server/ui``): read-only viewer keys, named and revocable like admin keys,
# and the browser's sign-in sessions (a cookie's token kept as its SHA-256, the key it signed in with).
_V5 = SchemaStep(
    5,
    "the store browser: viewer keys and sign-in sessions",
    (
        """CREATE TABLE viewer_keys (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                key_hash TEXT NOT NULL UNIQUE,
                created_at {ordered} NOT NULL,
                revoked_at {ordered}
            )""",
        """CREATE TABLE ui_sessions (
                token_hash TEXT PRIMARY KEY,
                key_kind TEXT NOT NULL,
                key_id TEXT NOT NULL,
                created_at {ordered} NOT NULL,
                expires_at {ordered} NOT NULL
            )""",
        "CREATE INDEX ui_sessions_by_key ON ui_sessions (key_id)",
    ),
)

SCHEMA: tuple[SchemaStep, ...] = (_V1, _V2, _V3, _V4, _V5)
