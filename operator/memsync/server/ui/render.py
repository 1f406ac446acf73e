"""The store browser's pages: Jinja2 templates shipped in the package, and the pure helpers they use.

Jinja2 escapes every value (autoescape on for every template, undefined names are errors); nothing from a
store is ever marked safe. Markdown is shown as the text it is, never rendered: an agent's memory is read as
written. ``visible`` goes one step further than escaping, for the characters that escaping leaves invisible
or misleading: control characters, and the bidirectional and zero-width formatting characters that can make
a text read differently from what it holds (a right-to-left override reversing the rest of a line). Each is
shown as its code point in a marked box. ``diff_lines`` is the diff of two versions (``difflib``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape
from starlette.responses import HTMLResponse

#: Controls (C0 but tab and newline, DEL, C1), bidirectional marks, embeddings, overrides and isolates,
#: zero-width characters, the line and paragraph separators and the byte order mark.
_HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb]"
)
_MARK = Markup('<span class="ctl" title="an invisible or direction-changing character">U+{0:04X}</span>')


def visible(text: str | None) -> Markup:
    """``text`` escaped, with every hidden or direction-changing character shown as ``U+XXXX``."""
    if text is None:
        return Markup("")
    parts: list[Markup] = []
    last = 0
    for match in _HIDDEN.finditer(text):
        parts.append(escape(text[last : match.start()]))
        parts.append(_MARK.format(ord(match.group())))
        last = match.end()
    parts.append(escape(text[last:]))
    return Markup("").join(parts)


def human_size(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB"


def when(ts: str | datetime | None) -> str:
    """A server timestamp as ``2026-01-31 12:00:00Z`` (seconds; the full value is in the title)."""
    if ts is None:
        return "-"
    text = ts if isinstance(ts, str) else ts.isoformat()
    return text[:19].replace("T", " ") + "Z"


def actor(created_by: Mapping[str, Any] | None) -> str:
    """Who an actor object names: a session id, an admin key id, ..."""
    if not created_by:
        return "-"
    for field in ("session_id", "api_key_id", "user_id", "service_account_id"):
        if field in created_by:
            return str(created_by[field])
    return str(created_by.get("type", "-"))


@dataclass(frozen=True)
class DiffLine:
    kind: Literal["same", "add", "del", "gap"]
    old_no: int | None
    new_no: int | None
    text: str


def diff_lines(old: str, new: str, context: int = 3) -> list[DiffLine]:
    """The changed lines of ``old`` -> ``new`` with ``context`` unchanged lines around each change, a
    ``gap`` between groups; no line at all when they are equal."""
    a, b = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    out: list[DiffLine] = []
    for group in matcher.get_grouped_opcodes(context):
        if out:
            out.append(DiffLine("gap", None, None, ""))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(DiffLine("same", i + 1, j1 + k + 1, a[i]) for k, i in enumerate(range(i1, i2)))
                continue
            out.extend(DiffLine("del", i + 1, None, a[i]) for i in range(i1, i2))
            out.extend(DiffLine("add", None, j + 1, b[j]) for j in range(j1, j2))
    return out


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("memsync.server.ui", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(visible=visible, size=human_size, when=when, actor=actor)
    return env


ENVIRONMENT = _environment()


def page(name: str, context: Mapping[str, Any], status: int = 200) -> HTMLResponse:
    """The template ``name`` rendered with ``context`` as an HTML answer."""
    return HTMLResponse(ENVIRONMENT.get_template(name).render(**context), status_code=status)
