"""``memsync store backup|restore``: copy the SQLite file of a store server while it runs, or put one back.

Both are thin over ``memsync.server.storage.backup``; on PostgreSQL they say how to use its own tools.
"""

from __future__ import annotations

from pathlib import Path

import click

from memsync.server.storage.backends import is_postgres
from memsync.server.storage.backup import BackupError, backup_sqlite, restore_sqlite

#: ``--db`` of ``serve``, ``backup`` and ``restore``.
db_option = click.option(
    "--db",
    "database",
    default="./memsync-store.db",
    show_default=True,
    envvar="MEMSYNC_STORE_DB",
    show_envvar=True,
    help="An SQLite file (created if missing), or a PostgreSQL URL (postgresql://USER@HOST:PORT/DB; the "
    "password from PGPASSWORD or a passfile, never the command line).",
)

PG_BACKUP_GUIDANCE = (
    "PostgreSQL: back up with pg_dump (pg_dump --format=custom --file=store.dump URL) and restore with "
    "pg_restore into an empty database (pg_restore --dbname=URL store.dump); see docs/store-server.md"
)


@click.command()
@click.argument("destination", type=click.Path(dir_okay=False, path_type=Path))
@db_option
def backup(*, destination: Path, database: str) -> None:
    """Copy the SQLite database to DESTINATION while the server keeps running (SQLite's online backup)."""
    if is_postgres(database):
        raise click.UsageError(PG_BACKUP_GUIDANCE)
    try:
        pages = backup_sqlite(Path(database), destination)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"backed up {database} to {destination} ({pages} pages)", err=True)


@click.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option
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
