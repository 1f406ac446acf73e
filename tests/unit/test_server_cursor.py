"""Page cursors: opaque, HMAC-signed, bound to their query, expiring."""

from __future__ import annotations

import base64
import json

import pytest

from memsync.server.errors import ApiError
from memsync.server.stores.cursor import CursorState, decode_cursor, encode_cursor, query_fingerprint

KEY = b"k" * 32
FP = query_fingerprint(
    {"kind": "memories", "store": "memstore_1", "prefix": "/", "depth": 0, "view": "basic"}
)


def _cursor(position: str | int = "/a/b", expires_at: int = 2_000, fingerprint: str = FP) -> str:
    return encode_cursor(KEY, CursorState(position, fingerprint, expires_at))


def _refused(token: str, fingerprint: str = FP, now: float = 1_000, key: bytes = KEY) -> str:
    with pytest.raises(ApiError) as exc:
        decode_cursor(key, token, fingerprint, now)
    assert exc.value.status == 400
    assert exc.value.error_type == "invalid_request_error"
    return exc.value.message


def test_round_trip() -> None:
    token = _cursor("/notes/é.md")
    assert token.startswith("page_")
    assert decode_cursor(KEY, token, FP, 1_000) == "/notes/é.md"
    assert decode_cursor(KEY, _cursor(42), FP, 1_000) == 42


def test_fingerprint_ignores_key_order_but_not_values() -> None:
    assert query_fingerprint({"a": 1, "b": "x"}) == query_fingerprint({"b": "x", "a": 1})
    assert query_fingerprint({"a": 1}) != query_fingerprint({"a": 2})
    assert query_fingerprint({"depth": 0}) != query_fingerprint({"depth": 1})


def test_tampered_payload_is_refused() -> None:
    token = _cursor("/a")
    payload, sig = token[len("page_") :].split(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    data["p"] = "/z"
    forged = base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")
    assert "signature" in _refused(f"page_{forged}.{sig}")


def test_forged_cursors_are_refused() -> None:
    assert "malformed" in _refused("page_garbage")
    assert "malformed" in _refused("nonsense")
    assert "malformed" in _refused("page_!!!.???")
    assert "signature" in _refused(_cursor(), key=b"another key")
    token = _cursor()
    assert "signature" in _refused(token[:-2] + ("AA" if not token.endswith("AA") else "BB"))


def test_expired_cursor_is_refused() -> None:
    assert "expired" in _refused(_cursor(expires_at=999), now=1_000)
    assert decode_cursor(KEY, _cursor(expires_at=1_000), FP, 1_000) == "/a/b"


def test_cursor_of_another_query_is_refused() -> None:
    other = query_fingerprint({"kind": "memories", "store": "memstore_1", "prefix": "/x/", "depth": 0})
    assert "different query" in _refused(_cursor(), fingerprint=other)


def test_messages_never_echo_the_cursor() -> None:
    token = _cursor("/secret/path")
    other = query_fingerprint({"x": 1})
    for message in (_refused(token, fingerprint=other), _refused(token + "x"), _refused(token, now=10**10)):
        assert token not in message
        assert "/secret/path" not in message
