"""Opaque ``page_`` cursors: keyset positions, HMAC-signed, bound to their query, with an expiry.

A cursor holds the last item a page returned (a path for memory listings, a sequence number for store and
version listings), a fingerprint of the query it belongs to, and when it expires. Because it holds a
position rather than an offset, a walk stays correct while other requests insert or delete: nothing
returned is returned again, and nothing that stayed in place is skipped.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass

from memsync.server.errors import invalid

CURSOR_PREFIX = "page_"
_SIG_BYTES = 16


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    """Strict base64url: any character outside the alphabet is an error (not silently dropped)."""
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def query_fingerprint(query: Mapping[str, object]) -> str:
    """A short digest of everything that defines a listing except its position and page size."""
    canonical = json.dumps(dict(query), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class CursorState:
    position: str | int
    fingerprint: str
    expires_at: int  # unix seconds


def _sign(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, b"memsync-cursor-v1\x00" + payload, hashlib.sha256).digest()[:_SIG_BYTES]


def encode_cursor(key: bytes, state: CursorState) -> str:
    payload = json.dumps(
        {"p": state.position, "q": state.fingerprint, "x": state.expires_at}, separators=(",", ":")
    ).encode("utf-8")
    return f"{CURSOR_PREFIX}{_b64(payload)}.{_b64(_sign(key, payload))}"


_RESTART = "start the listing again without 'page'"


def decode_cursor(key: bytes, token: str, fingerprint: str, now: float) -> str | int:
    """The position a cursor resumes after, or a 400 when it is forged, tampered, expired or from another
    query."""
    if not token.startswith(CURSOR_PREFIX):
        raise invalid(f"page cursor is malformed: it must be a 'page_...' value from next_page; {_RESTART}")
    body = token[len(CURSOR_PREFIX) :]
    payload_text, sep, sig_text = body.partition(".")
    malformed = invalid(f"page cursor is malformed: it was not issued by this server; {_RESTART}")
    if not sep:
        raise malformed
    try:
        payload = _unb64(payload_text)
        signature = _unb64(sig_text)
    except (ValueError, binascii.Error):
        raise malformed from None
    if not hmac.compare_digest(signature, _sign(key, payload)):
        raise invalid(f"page cursor is invalid: its signature does not match (forged or altered); {_RESTART}")
    try:
        data = json.loads(payload)
        position = data["p"]
        bound_to = data["q"]
        expires_at = int(data["x"])
    except (ValueError, KeyError, TypeError):
        raise invalid(f"page cursor is malformed; {_RESTART}") from None
    if not isinstance(position, str | int) or isinstance(position, bool):
        raise invalid(f"page cursor is malformed; {_RESTART}")
    if now > expires_at:
        raise invalid(f"page cursor has expired; {_RESTART}")
    if not hmac.compare_digest(str(bound_to), fingerprint):
        raise invalid(
            "page cursor belongs to a different query (another store, path_prefix, depth, view or filter); "
            f"pass the same query parameters as the request that returned it, or {_RESTART}"
        )
    return position
