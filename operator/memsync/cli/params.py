"""Argument types of the store admin commands, checked before any request is made.

An id is refused when it is empty, when it looks like a credential (an easy copy-paste mistake: the value
would otherwise travel in a request path into the server's access log), or when it holds a character no id
has (the rule is ``memsync.api.ids.id_problem``, shared with the agent and the server). The refusal names
the argument and never echoes a value that may be a secret.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import click

from memsync.api.ids import id_problem

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


class MemoryRefType(IdType):
    """A memory by id (``mem_...``) or by its path (``/notes/todo.md``)."""

    name = "memory"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if text.startswith("/"):
            return text
        return super().convert(text, param, ctx)


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
