"""The work-item secret (api/secret.py): any value decodes to a sessions token or to ``WorkSecretError``, the
error never shows any of the secret, and what memsync encodes decodes back unchanged.

For any string (and for None): ``decode_work_secret`` returns a ``WorkSecret`` with a non-blank token or
raises only ``WorkSecretError``, whose message is one of the documented sentences (only the secret's length
may appear in it). For any non-blank token and base URL, ``decode_work_secret(encode_work_secret(t, u))``
gives ``t`` and ``u`` back, the encoded secret is unpadded base64url, and a decoded secret's ``repr`` and
``str`` never show the token.
"""

from __future__ import annotations

import base64
import json
import re

from harness import holds, provider

from memsync.api.secret import (
    NO_SESSIONS_TOKEN,
    WorkSecret,
    WorkSecretError,
    decode_work_secret,
    encode_work_secret,
)

_HEAD = re.escape(NO_SESSIONS_TOKEN)
MESSAGES = tuple(
    re.compile(_HEAD + r)
    for r in (
        r": ANTHROPIC_WORK_SECRET is empty or not set",
        r": the work-item secret is not base64url-encoded JSON \(\d+ characters received\)",
        r": the work-item secret's JSON is not an object",
        r": the work-item secret has no string 'sessions_token' field",
        r": the work-item secret's 'sessions_token' is empty",
    )
)
UNPADDED_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


def check_decode(secret: str | None) -> None:
    try:
        decoded = decode_work_secret(secret)
    except WorkSecretError as exc:
        holds(any(m.fullmatch(str(exc)) for m in MESSAGES), f"decode_work_secret({secret!r}): {exc}")
        return
    holds(
        isinstance(decoded, WorkSecret) and bool(decoded.sessions_token.strip()),
        f"{secret!r} -> a blank token",
    )
    check_hidden(decoded)


def check_hidden(decoded: WorkSecret) -> None:
    shown = f"WorkSecret(sessions_token=<redacted>, api_base_url={decoded.api_base_url!r})"
    holds(repr(decoded) == shown and str(decoded) == shown, f"{decoded!r} shows more than the base URL")


def as_payload(fdp_json: str) -> str:
    """A secret made of base64url-encoded text (most inputs reach the JSON parser, not the base64 error)."""
    return base64.urlsafe_b64encode(fdp_json.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")


def test_one_input(data: bytes) -> None:
    fdp = provider(data)
    mode = fdp.ConsumeIntInRange(0, 3)
    if mode == 0:
        check_decode(fdp.ConsumeUnicode(fdp.remaining_bytes()))
    elif mode == 1:
        check_decode(as_payload(fdp.ConsumeUnicode(fdp.remaining_bytes())))
    elif mode == 2:
        token = fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 200))
        url = fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 200)) if fdp.ConsumeBool() else None
        fields = {"sessions_token": token, "api_base_url": url, fdp.ConsumeUnicode(8): fdp.ConsumeUnicode(8)}
        check_decode(as_payload(json.dumps(fields)))
    else:
        token = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 200))
        url = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 200)) if fdp.ConsumeBool() else None
        if not token.strip():
            return
        secret = encode_work_secret(token, url)
        holds(UNPADDED_BASE64URL.fullmatch(secret) is not None, f"encode_work_secret gave {secret!r}")
        decoded = decode_work_secret(secret)
        holds(
            (decoded.sessions_token, decoded.api_base_url) == (token, url),
            f"{token!r}, {url!r} came back otherwise",
        )
        check_hidden(decoded)
