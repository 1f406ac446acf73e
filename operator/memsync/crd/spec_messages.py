"""A spec's validation error as one line a status message can carry: each field path and what is allowed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError


class InvalidSpecError(ValueError):
    """The spec is invalid; ``str()`` names every offending field path and what is allowed."""


_SCALARS = (str, int, float, bool, type(None))


def _format_loc(loc: tuple[int | str, ...], prefix: str) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(object)"


def describe_validation_error(exc: ValidationError, *, prefix: str = "") -> str:
    """One line per problem, ``<field path>: <what is wrong and what is allowed>``, joined by ``; ``.

    ``prefix`` is prepended to every path (``"spec"`` when ``exc`` came from :class:`SessionMemorySpec`).
    A validator's message may hold several lines, each starting with a path relative to the field
    (``.image: is required``, ``[0].name: ...``). The offending value is echoed only when it is a short
    scalar outside ``template`` (whose ``env`` may hold literal values the user did not mean to publish in a
    status message).
    """
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        path = _format_loc(loc, prefix)
        kind = err.get("type", "")
        msg = str(err.get("msg", "invalid"))
        if kind == "value_error":
            for line in msg.removeprefix("Value error, ").split("\n"):
                relative = line[:1] in (".", "[", ":")
                lines.append(f"{path}{line}" if relative else f"{path}: {line}")
            continue
        if kind == "missing":
            text = "is required"
        elif kind == "extra_forbidden":
            text = "is not a field of the SessionMemory schema (check the spelling and the nesting)"
        else:
            text = msg[:1].lower() + msg[1:]
            value = err.get("input")
            if (
                "template" not in loc
                and isinstance(value, _SCALARS)
                and not (isinstance(value, str) and len(value) > 80)
            ):
                text += f" (got {value!r})"
        lines.append(f"{path}: {text}")
    return "; ".join(lines)


def plain(value: Any) -> Any:
    """A deep copy as plain dicts and lists (kopf hands out mapping views over the raw object)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value
