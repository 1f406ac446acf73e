"""The shape of an id (a store, memory, version, session or key id), one rule for every process.

The agent, the command line and the store server all ask ``id_problem`` before an id goes into a request
path, and the server's access log asks ``looks_like_credential`` of every path segment and query value: a
credential pasted where an id belongs (an easy copy-paste mistake) is refused before any request and, if one
reaches the server anyway, is never written to its log. A refusal never echoes the value: it may be a
secret.
"""

from __future__ import annotations

import re
from typing import Final

#: Prefixes of credentials: never an id. Every credential the store server issues starts with one of them
#: (sessions tokens and admin keys ``sk-``, ``server/ids.py``; environment keys ``msenv-``,
#: ``server/environments/service.py``), and so do the hosted service's API keys (``sk-``).
CREDENTIAL_PREFIXES: Final = ("sk-", "msenv-")
MAX_ID_LENGTH: Final = 128
_ID_CHARS: Final = re.compile(r"[A-Za-z0-9_-]")
_ID: Final = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_ID_LENGTH - 1}}}")


def looks_like_credential(value: str) -> bool:
    """Whether ``value`` starts like a credential (case-insensitive, leading blanks ignored)."""
    return value.lstrip().lower().startswith(CREDENTIAL_PREFIXES)


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id, or None; the reason never repeats the value."""
    if _ID.fullmatch(value) is not None and not looks_like_credential(value):
        return None  # the common case, in one match (the store server asks this of every id in a path)
    if not value.strip():
        return "must not be empty"
    if looks_like_credential(value):
        return "looks like a credential, not an id (nothing was sent; is it the right value?)"
    bad = next((i for i, ch in enumerate(value) if not _ID_CHARS.fullmatch(ch)), None)
    if bad is not None:
        shown = value[bad] if value[bad].isprintable() else f"U+{ord(value[bad]):04X}"
        return f"an id holds only letters, digits, '_' and '-' (a {shown!r} at position {bad + 1})"
    if not value[0].isalnum():
        return "an id starts with a letter or a digit"
    if len(value) > MAX_ID_LENGTH:
        return f"an id is at most {MAX_ID_LENGTH} characters (this one has {len(value)})"
    return None
