"""Argument types of the command line, checked before any request is made or any file written.

An id is refused when it is empty, when it looks like a credential (an easy copy-paste mistake: the value
would otherwise travel in a request path into the server's access log), or when it holds a character no id
has (the rule is ``memsync.api.ids.id_problem``, shared with the agent and the server). The refusal names
the argument and never echoes a value that may be a secret.

A memory path or a ``--prefix`` given without its leading ``/`` is taken from the store's root (``a.md`` is
``/a.md``), and said once on stderr; a prefix always ends in ``/``. A file or folder argument must not be
empty: ``""`` would otherwise mean the current folder, where no one meant to write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import click

from memsync.api.ids import id_problem, looks_like_credential

if TYPE_CHECKING:  # generic in newer clicks only (pyproject allows click 8.1)
    _StrParam = click.ParamType[str, Any]
else:
    _StrParam = click.ParamType


class IdType(_StrParam):
    """An id argument (``memstore_...``, ``mem_...``, ``memver_...``, ``sesn_...``, ``apikey_...``)."""

    name = "id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        problem = id_problem(text)
        if problem is not None:
            self.fail(problem, param, ctx)
        return text


MEMORY_ID_PREFIX: Final = "mem_"
_said_from_root: list[str] = []


def from_root(text: str, what: str) -> str:
    """``text`` with a leading ``/``; when one was added, a note on stderr (the first time only)."""
    if text.startswith("/"):
        return text
    rooted = "/" + text
    if not _said_from_root:
        _said_from_root.append(text)
        click.echo(
            f"note: {what} {text!r} is taken from the store's root, as {rooted!r} (memory paths start "
            "with /)",
            err=True,
        )
    return rooted


class MemoryRefType(IdType):
    """A memory by id (``mem_...``) or by its path (``/notes/todo.md``; ``notes/todo.md`` is the same)."""

    name = "memory"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if text.startswith("/"):
            return text
        if text.startswith(MEMORY_ID_PREFIX) or not text.strip() or looks_like_credential(text):
            return super().convert(text, param, ctx)
        return from_root(text, "MEMORY")


def normalise_prefix(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--prefix``: a folder of the store, as the API takes it (``/notes/``); ``notes``, ``notes/`` and
    ``/notes`` are the same folder, and ``/`` (or nothing) is the whole store."""
    if value is None or value.strip("/") == "":
        return None
    rooted = from_root(value, "--prefix")
    return rooted if rooted.endswith("/") else rooted + "/"


class NonEmptyPath(click.Path):
    """A ``click.Path`` that refuses ``""`` (click would take it as the current folder)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("must not be empty (give a path; '.' is the current folder)", param, ctx)
        return super().convert(value, param, ctx)


ID: Final = IdType()
MEMORY_REF: Final = MemoryRefType()


def check_url(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--url``: an absolute http(s) URL with a host (the value is not echoed: it may carry a password)."""
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter("not an absolute http(s) URL (e.g. http://127.0.0.1:8700)", param=param)
    try:
        _ = parts.port
    except ValueError:
        raise click.BadParameter("the port is not a number from 0 to 65535", param=param) from None
    return value
