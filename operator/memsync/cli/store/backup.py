"""``memsync store backup|restore``: database commands, not HTTP ones.

They work on the store server's SQLite file itself (``--db``, required: they never guess which database is
meant), not through ``--url``: ``backup`` copies it while the server keeps running (SQLite's online backup),
``restore`` puts a copy in its place while the server is stopped. Both are thin over
``memsync.server.storage.backup``; on PostgreSQL they say how to use its own tools. ``--db`` is defined here
once, for them and for ``serve``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from memsync.cli.failures import CliError, ExitCode
from memsync.cli.params import NonEmptyPath
from memsync.server.storage.backends import is_postgres
from memsync.server.storage.backup import BackupError, backup_sqlite, restore_sqlite

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_DB = "./memsync-store.db"
DB_HELP = (
    "An SQLite file, or a PostgreSQL URL (postgresql://USER@HOST:PORT/DB; the password from PGPASSWORD or a "
    "passfile, never the command line)."
)


def check_db(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--db`` must name something: ``""`` would be a file without a name in the current folder."""
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty (an SQLite file or a postgresql:// URL)", param=param)
    return value


def db_option(*, required: bool) -> Callable[[F], F]:
    """``--db`` (env ``MEMSYNC_STORE_DB``): ``serve`` defaults to ``./memsync-store.db``, the database
    commands require it."""
    return click.option(
        "--db",
        "database",
        required=required,
        default=None if required else DEFAULT_DB,
        show_default=not required,
        envvar="MEMSYNC_STORE_DB",
        show_envvar=True,
        callback=check_db,
        help=DB_HELP + (" Required: the database to work on." if required else " Created if missing."),
    )


PG_BACKUP_GUIDANCE = (
    "PostgreSQL: back up with pg_dump (pg_dump --format=custom --file=store.dump URL) and restore with "
    "pg_restore into an empty database (pg_restore --dbname=URL store.dump); see docs/store-server.md"
)


def _existing_db(database: str) -> Path:
    """The SQLite file ``--db`` names, which must exist: a wrong path is a wrong argument (2), said before
    anything is written."""
    if is_postgres(database):
        raise click.UsageError(PG_BACKUP_GUIDANCE)
    path = Path(database)
    if not path.is_file():
        raise CliError(
            f"--db {database!r}: no database file there (backup works on the store server's SQLite file, "
            "not over --url: give the file's path)",
            ExitCode.USAGE,
        )
    return path


@click.command()
@click.argument("destination", type=NonEmptyPath(dir_okay=False, path_type=Path))
@db_option(required=True)
def backup(*, destination: Path, database: str) -> None:
    """Copy the SQLite database to DESTINATION while the server keeps running (SQLite's online backup)."""
    source = _existing_db(database)
    try:
        pages = backup_sqlite(source, destination)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"backed up {database} to {destination} ({pages} pages)", err=True)


@click.command()
@click.argument("source", type=NonEmptyPath(exists=True, dir_okay=False, path_type=Path))
@db_option(required=True)
@click.option("--force", is_flag=True, help="Replace an existing database file.")
def restore(*, source: Path, database: str, force: bool) -> None:
    """Put a backup in place of the SQLite database (stop the server first)."""
    if is_postgres(database):
        raise click.UsageError(PG_BACKUP_GUIDANCE)
    try:
        restore_sqlite(source, Path(database), force=force)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"restored {source} to {database}", err=True)
