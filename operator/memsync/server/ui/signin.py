"""Signing in to the store browser: an admin key or a viewer key, once, for a session held in a cookie.

The key is typed into the sign-in form (a POST: never in a URL) and checked like an ``x-api-key``; a
sessions token or an environment key is refused. The browser then holds only a random session token in an
``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` over TLS); the server keeps the token's SHA-256 and the
key's id (``ui_sessions``), so any replica knows the session, signing out ends it everywhere, and revoking
the key ends every session signed in with it. A session lasts ``SESSION_TTL_S`` from sign-in, never longer
than its key: each page reads the key again.

Every form that changes something carries ``csrf_token(session token)``: an HMAC of the session token, which
a page of another origin can neither read nor compute.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from memsync.server.access import AccessService, Principal
from memsync.server.ids import format_ts, now_ts, parse_ts, token_hash

SESSION_TTL_S = 8 * 3600  # a working day; then the key is typed again
COOKIE = "memsync_ui"
_CSRF_LABEL = b"memsync-ui-csrf"

Role = Literal["admin", "viewer"]


@dataclass(frozen=True)
class SignedIn:
    """A signed-in browser: who it acts as, with which kind of key, until when, and its forms' CSRF token."""

    principal: Principal
    role: Role
    key_id: str
    expires_at: str
    csrf: str

    @property
    def may_redact(self) -> bool:
        return self.role == "admin"


def csrf_token(session_token: str) -> str:
    return hmac.new(session_token.encode("utf-8"), _CSRF_LABEL, hashlib.sha256).hexdigest()


def csrf_matches(session_token: str, sent: str | None) -> bool:
    return sent is not None and hmac.compare_digest(csrf_token(session_token), sent)


class BrowserSessions:
    """Sign in, resolve a cookie's session, sign out."""

    def __init__(self, access: AccessService, ttl_s: int = SESSION_TTL_S) -> None:
        self.access = access
        self.db = access.db
        self.ttl_s = ttl_s

    def sign_in(self, key: str) -> tuple[str, SignedIn]:
        """A new session for ``key`` (an admin key or a viewer key): its token and what it signs in as.
        Raises the API's 401 for anything else."""
        principal = self.access.authenticate(key.strip(), None)
        role: Role = "viewer" if principal.viewer else "admin"
        token = secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        expires = format_ts(now + timedelta(seconds=self.ttl_s))
        with self.db.write() as tx:
            tx.insert_browser_session(token_hash(token), role, principal.actor_id, format_ts(now), expires)
        return token, SignedIn(principal, role, principal.actor_id, expires, csrf_token(token))

    def resolve(self, token: str | None) -> SignedIn | None:
        """The session a cookie names, while it and its key are current; None otherwise."""
        if not token:
            return None
        with self.db.read_each() as tx:
            row = tx.browser_session(token_hash(token))
            if row is None or row.expires_at <= now_ts():
                return None
            key = tx.admin_key(row.key_id) if row.key_kind == "admin" else tx.viewer_key(row.key_id)
        if key is None or key.revoked_at is not None:
            return None
        role: Role = "viewer" if row.key_kind == "viewer" else "admin"
        principal = Principal("api_actor", key.id, viewer=role == "viewer")
        return SignedIn(principal, role, key.id, row.expires_at, csrf_token(token))

    def sign_out(self, token: str) -> None:
        with self.db.write() as tx:
            tx.delete_browser_session(token_hash(token))

    def seconds_left(self, signed: SignedIn) -> int:
        return max(0, int((parse_ts(signed.expires_at) - datetime.now(UTC)).total_seconds()))
