"""``memsync store``: run the self-hosted store server, and administer one over HTTP.

``serve`` (``memsync.cli.store.serve``) runs the server; ``backup`` and ``restore`` (``backup``) work on
its SQLite file; ``create``, ``list``, ``token``, ``admin-key`` and ``viewer-key`` (``admin``), ``import``
(``importing``) and ``export`` (``exporting``, both over ``transfer``) and ``show``, ``delete``,
``archive``, ``memories``, ``history``, ``cat`` and ``redact`` (``inspect``) talk to a running server with
the store client and the admin key. This module is only the group: each command's module is imported only
when one of its commands runs, so the admin commands never load the server.
"""

from __future__ import annotations

from typing import Final

import click

from memsync.cli.lazy import Lazy, lazy_group

_ADMIN: Final = "memsync.cli.store.admin"
_IMPORT: Final = "memsync.cli.store.importing"
_EXPORT: Final = "memsync.cli.store.exporting"
_SERVE: Final = "memsync.cli.store.serve"
_BACKUP: Final = "memsync.cli.store.backup"
_INSPECT: Final = "memsync.cli.store.inspect"

COMMANDS: Final = {
    "admin-key": Lazy(
        _ADMIN,
        "admin_key",
        "Named admin keys: several may be current at once, so a key can be rotated (create the new key, "
        "move the clients to it, revoke the old one).",
    ),
    "archive": Lazy(
        _INSPECT,
        "archive",
        "Archive a store: it stays readable, refuses writes, and cannot be attached to new sessions.",
    ),
    "backup": Lazy(
        _BACKUP,
        "backup",
        "Copy the SQLite database to DESTINATION while the server keeps running (SQLite's online backup).",
    ),
    "cat": Lazy(
        _INSPECT,
        "cat",
        "Print a memory's content: MEMORY (its id or path), or one version of it with --version.",
    ),
    "create": Lazy(
        _ADMIN, "create", "Create a memory store; print its id (-o json|yaml: the whole store object)."
    ),
    "delete": Lazy(
        _INSPECT,
        "delete",
        "Delete a store with all its memories and their versions (asks first; --yes to skip).",
    ),
    "export": Lazy(
        _EXPORT,
        "export",
        "Write every memory of a store as a file below DIRECTORY (created if missing; a folder that holds "
        "files needs --merge or --force).",
    ),
    "history": Lazy(_INSPECT, "history", "A memory's versions, newest first."),
    "import": Lazy(
        _IMPORT,
        "import_",
        "Upload a directory tree into a store: each UTF-8 file becomes the memory at its relative path.",
    ),
    "list": Lazy(_ADMIN, "list_", "List memory stores (newest first)."),
    "memories": Lazy(
        _INSPECT,
        "memories",
        "A store's memories as a tree, with sizes and memory ids (-o json|yaml: no content).",
    ),
    "redact": Lazy(
        _INSPECT,
        "redact",
        "Erase the content of one version for good (e.g. a leaked secret); asks first, --yes to skip.",
    ),
    "restore": Lazy(
        _BACKUP, "restore", "Put a backup in place of the SQLite database (stop the server first)."
    ),
    "serve": Lazy(
        _SERVE, "serve", "Run the store server (FastAPI + uvicorn over an SQLite file or PostgreSQL)."
    ),
    "show": Lazy(
        _INSPECT,
        "show",
        "Show a store: name, description, times, metadata, and how many memories it holds.",
    ),
    "viewer-key": Lazy(
        _ADMIN,
        "viewer_key",
        "Named viewer keys: read-only keys for the store browser (/ui/) and the API's reads; they list and "
        "read every store and write nothing.",
    ),
    "token": Lazy(
        _ADMIN,
        "token",
        "Mint a session with the given stores attached; print its work-item secret (and nothing else) "
        "on stdout.",
    ),
}


@click.group("store", cls=lazy_group(COMMANDS))
def store() -> None:
    """The self-hosted memory store server and its admin commands."""
