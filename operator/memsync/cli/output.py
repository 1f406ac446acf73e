"""How every listing command prints: ``-o/--output table|wide|json|yaml``, one shape for machines.

``table`` (the default) is columns for people, ``wide`` the same with more columns. ``json`` and ``yaml``
print one document: a listing is ``{"items": [...]}`` (as kubectl prints a List), each item the object's own
shape (the API's for store objects, the resource's camelCase for SessionMemories). ``--json`` is kept as a
hidden, deprecated alias of ``-o json``. Only click is imported at module level (PyYAML when it prints YAML).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Final, Literal, TypeVar, cast

import click

Output = Literal["table", "wide", "json", "yaml"]
FORMATS: Final[tuple[Output, ...]] = ("table", "wide", "json", "yaml")
F = TypeVar("F", bound=Callable[..., Any])


def output_options(func: F) -> F:
    """``-o/--output`` (and the deprecated ``--json``), handed to the command as ``output``."""

    @functools.wraps(func)
    def wrapper(*args: Any, output: str, as_json: bool, **kwargs: Any) -> Any:
        if as_json:
            if output not in ("table", "json"):
                raise click.UsageError("--json is -o json: it cannot go with -o " + output)
            output = "json"
        return func(*args, output=output, **kwargs)

    decorated = click.option(
        "--json", "as_json", is_flag=True, hidden=True, help="Deprecated: the same as -o json."
    )(wrapper)
    decorated = click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="table, wide (more columns), json or yaml (a listing is one document: {items: [...]}).",
    )(decorated)
    return cast(F, decorated)


def is_data(output: str) -> bool:
    """Whether ``output`` is for machines (json, yaml) rather than a table."""
    return output in ("json", "yaml")


def dump(data: Any, output: str) -> str:
    """``data`` (JSON-ready) as one JSON or YAML document."""
    if output == "yaml":
        import yaml  # noqa: PLC0415 (only YAML output needs it)

        text: str = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        return text.rstrip("\n")
    return json.dumps(data, indent=2, ensure_ascii=False)


def listing(items: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The one shape of a listing in json and yaml."""
    return {"items": list(items)}


def timestamp(value: datetime | None) -> str:
    """A time as the tables show it (UTC, to the second), ``-`` for none."""
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else "-"
