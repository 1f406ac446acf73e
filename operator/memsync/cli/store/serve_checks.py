"""``memsync store serve``'s configuration, checked before anything is written or served.

Each mistake is a usage error (exit 2) naming the option and what it allows, said before the admin key file
is generated beside the database: a ``--db`` whose folder is missing, that is a folder, or that is a file
but not an SQLite database; a wildcard ``--host`` (no client reaches ``http://0.0.0.0``) without
``--public-url``, the address put into every minted work secret; an admin key too short to resist guessing.
A PostgreSQL server that does not answer is exit 5, naming its host and port (never the URL: it may hold a
password).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Final

from memsync.cli.failures import CliError, ExitCode
from memsync.server.storage.backends import is_postgres

#: The first 16 bytes of every SQLite database file (an empty file is a new database too).
SQLITE_HEADER: Final = b"SQLite format 3\x00"
#: An admin key holds at least this many characters (``memsync dev`` and ``serve`` generate 60).
MIN_ADMIN_KEY_LENGTH: Final = 32
PG_CONNECT_TIMEOUT_S: Final = 10


def is_wildcard(host: str) -> bool:
    """Whether ``host`` is an address that means "every interface" (0.0.0.0, ::): no client can use it."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return host == ""


def check_public_url(host: str, public_url: str | None) -> None:
    if public_url is None and is_wildcard(host):
        raise CliError(
            f"--public-url is required with --host {host!r}: minted work secrets carry the URL "
            "clients reach this server at, and a wildcard address is none (e.g. --public-url "
            "http://store.example:8700)",
            ExitCode.USAGE,
        )


def long_enough(key: str, source: str) -> str:
    """``key`` when it is long enough to be an admin key (the refusal never shows it)."""
    if len(key) < MIN_ADMIN_KEY_LENGTH:
        raise CliError(
            f"the admin key from {source} has {len(key)} characters; an admin key has at least "
            f"{MIN_ADMIN_KEY_LENGTH} (e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')",
            ExitCode.USAGE,
        )
    return key


def sqlite_problem(path: Path) -> str | None:
    """Why ``path`` cannot be an SQLite database file, or None (it is one, an empty file, or absent in a
    folder that exists)."""
    if not path.parent.is_dir():
        return f"the folder {path.parent} does not exist (create it first)"
    if path.is_dir():
        return "is a folder; give the path of a database file in it (e.g. DIR/store.db)"
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read it: {exc.strerror}"
    if head and head != SQLITE_HEADER:
        return "the file is not an SQLite database (give a new path, or a store database)"
    return None


def check_database(database: str) -> None:
    if is_postgres(database):
        check_postgres(database)
        return
    problem = sqlite_problem(Path(database))
    if problem is not None:
        raise CliError(f"--db {database!r}: {problem}", ExitCode.USAGE)


def check_postgres(url: str) -> None:
    """One connection, to say at once (not after the pool's 30 s) that PostgreSQL does not answer."""
    import psycopg  # noqa: PLC0415 - loaded only for PostgreSQL
    from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415

    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise CliError(f"--db: not a PostgreSQL URL: {exc}", ExitCode.USAGE) from None
    where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
    try:
        psycopg.connect(url, connect_timeout=PG_CONNECT_TIMEOUT_S).close()
    except psycopg.OperationalError as exc:
        why = " ".join(str(exc).split())
        code = ExitCode.UNAUTHORIZED if "authentication" in why else ExitCode.UNREACHABLE
        raise CliError(f"--db: cannot connect to PostgreSQL at {where}: {why}", code) from None
