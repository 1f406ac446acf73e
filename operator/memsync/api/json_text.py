"""JSON text from outside (a secret, an environment variable, a termination message, a server's answer),
parsed with one kind of failure.

``json.loads`` raises ``ValueError`` for text that is not JSON, but ``RecursionError`` for arrays or objects
nested past the interpreter's recursion limit (about a thousand levels: a few kilobytes of ``[``), which
callers that catch ``ValueError`` let through. ``loads`` turns that into a ``ValueError`` too.
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; any text that is not a JSON value raises ``ValueError``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
