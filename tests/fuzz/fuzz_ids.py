"""The id rule (api/ids.py) and the client's request-path segment (client/core.py ``seg``): an accepted id is
exactly one harmless path segment, and a refusal never repeats the value (it may be a pasted secret).

For any string: ``id_problem`` returns None or a reason and raises nothing. It accepts exactly the strings of
1-128 ASCII letters, digits, '_' and '-' that start with a letter or digit and do not start like a
credential (``looks_like_credential``: 'sk-' or 'msenv-', any case, after blanks); a credential-shaped
value is refused as one. A reason is one of the rule's fixed sentences, in which only one character of the
value (or its code point), a position and a length may appear. ``seg`` turns any string of valid Unicode
that is not empty, '.' or '..' into one request-path segment (no '/', not a dot segment) that unquotes back
to the string, and refuses the rest with a plain ``ValueError`` that does not repeat the value.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from harness import Provider, holds, pick, provider

from memsync.api.ids import MAX_ID_LENGTH, id_problem, looks_like_credential
from memsync.client.core import seg

VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
#: Every reason ``id_problem`` may give, with the only parts that depend on the value as groups.
REASONS = tuple(
    re.compile(r)
    for r in (
        r"must not be empty",
        r"looks like a credential, not an id \(nothing was sent; is it the right value\?\)",
        r"an id holds only letters, digits, '_' and '-' \(a "
        r"(?:'[^'\\]'|'\\.'|\"'\"|'U\+[0-9A-F]{4,6}') at position \d+\)",
        r"an id starts with a letter or a digit",
        rf"an id is at most {MAX_ID_LENGTH} characters \(this one has \d+\)",
    )
)
PIECES = (
    "sk-",
    "SK-",
    "msenv-",
    " ",
    "\t",
    "abc",
    "A1",
    "_",
    "-",
    "/",
    ".",
    "..",
    "%2F",
    "\x00",
    "\ud800",
    "é",
    "0",
)


def value_from(fdp: Provider) -> str:
    parts = []
    for _ in range(fdp.ConsumeIntInRange(0, 6)):
        parts.append(
            pick(fdp, PIECES) if fdp.ConsumeBool() else fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 40))
        )
    if fdp.ConsumeIntInRange(0, 15) == 0:
        parts.append("a" * fdp.ConsumeIntInRange(100, 140))
    return "".join(parts)


def check_id(value: str) -> None:
    problem = id_problem(value)
    expected = VALID.fullmatch(value) is not None and not looks_like_credential(value)
    holds((problem is None) == expected, f"id_problem({value!r}) = {problem!r}")
    if problem is None:
        return
    holds(
        any(r.fullmatch(problem) for r in REASONS),
        f"id_problem({value!r}) gave an unknown reason {problem!r}",
    )
    if looks_like_credential(value) and value.strip():
        holds("credential" in problem, f"credential-shaped {value!r} refused as {problem!r}")


def _unicode(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_segment(value: str) -> None:
    refused = value in ("", ".", "..") or not _unicode(value)
    try:
        segment = seg(value)
    except ValueError as exc:
        holds(refused, f"seg refused {value!r}: {exc}")
        shown = value in str(exc) and value not in ("", ".", "..")
        holds(type(exc) is ValueError and not shown, f"seg({value!r}): {exc!r}")
        return
    holds(not refused, f"seg({value!r}) = {segment!r} is not one segment")
    holds("/" not in segment and segment not in (".", ".."), f"seg({value!r}) = {segment!r}")
    holds(unquote(segment) == value, f"seg({value!r}) = {segment!r} unquotes otherwise")


def test_one_input(data: bytes) -> None:
    fdp = provider(data)
    value = value_from(fdp)
    check_id(value)
    check_segment(value)
