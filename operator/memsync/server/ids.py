"""Identifiers and timestamps the server issues."""

from __future__ import annotations

import base64
import hashlib
import secrets
from datetime import UTC, datetime

STORE_PREFIX = "memstore_"
MEMORY_PREFIX = "mem_"
VERSION_PREFIX = "memver_"
SESSION_PREFIX = "sesn_"
API_KEY_PREFIX = "apikey_"
SESSIONS_TOKEN_PREFIX = "sk-ant-req-"  # noqa: S105 - a public prefix, not a secret


def new_id(prefix: str) -> str:
    """``prefix`` + 24 random lowercase base32 characters (120 bits)."""
    return prefix + base64.b32encode(secrets.token_bytes(15)).decode("ascii").lower()


def new_sessions_token() -> str:
    return SESSIONS_TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the server keeps of a sessions token: its SHA-256 (tokens are 256 random bits: no salt needed)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def api_key_id(admin_key: str) -> str:
    """A stable, non-reversible id for the admin key, used as the ``api_actor`` of its writes."""
    return (
        API_KEY_PREFIX
        + hashlib.sha256(b"memsync-api-key-id\x00" + admin_key.encode("utf-8")).hexdigest()[:24]
    )


_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_ts(moment: datetime) -> str:
    """RFC 3339 in UTC with microseconds and ``Z``: fixed width, so strings sort as instants do.

    ``isoformat``, not ``strftime``: the C library's ``%Y`` does not pad years before 1000 ('999-12-31...'
    sorts after '2026-...'), and a filter may name one."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def now_ts() -> str:
    return format_ts(datetime.now(UTC))


def parse_ts(text: str) -> datetime:
    """A timestamp this server wrote (``format_ts``) back to an aware datetime."""
    return datetime.strptime(text, _TS_FORMAT).replace(tzinfo=UTC)


ADMIN_KEY_PREFIX = "sk-memsync-admin-"  # a public prefix, not a secret
VIEWER_KEY_PREFIX = "sk-memsync-viewer-"  # a public prefix, not a secret


def new_admin_key() -> str:
    return ADMIN_KEY_PREFIX + secrets.token_urlsafe(32)


def new_viewer_key() -> str:
    return VIEWER_KEY_PREFIX + secrets.token_urlsafe(32)
