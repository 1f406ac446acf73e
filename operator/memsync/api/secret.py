"""The work-item secret: base64url JSON carrying ``sessions_token`` and ``api_base_url``.

Every error raised here describes what is wrong with the secret without ever including the secret, or any
part of it, in the message.
"""

from __future__ import annotations

import base64
import binascii
import json

from pydantic import BaseModel, ConfigDict, ValidationError

from memsync.api import json_text

# Documented wording (see agent/messages.py): operators grep for it.
NO_SESSIONS_TOKEN = "the work item carried no sessions token"  # noqa: S105 - a message, not a password


class WorkSecretError(ValueError):
    """The secret is missing or does not yield a sessions token. The message never echoes the secret."""


class WorkSecret(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sessions_token: str
    api_base_url: str | None = None

    def __repr__(self) -> str:  # never show the token, not even in a debugger or a traceback
        return f"WorkSecret(sessions_token=<redacted>, api_base_url={self.api_base_url!r})"

    __str__ = __repr__


def decode_work_secret(secret: str | None) -> WorkSecret:
    """Decode base64url JSON (padded or not) into a WorkSecret, or raise WorkSecretError."""
    if secret is None or not secret.strip():
        raise WorkSecretError(f"{NO_SESSIONS_TOKEN}: ANTHROPIC_WORK_SECRET is empty or not set")
    text = secret.strip()
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        payload = json_text.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise WorkSecretError(
            f"{NO_SESSIONS_TOKEN}: the work-item secret is not base64url-encoded JSON "
            f"({len(text)} characters received)"
        ) from None
    if not isinstance(payload, dict):
        raise WorkSecretError(f"{NO_SESSIONS_TOKEN}: the work-item secret's JSON is not an object")
    try:
        decoded = WorkSecret.model_validate(payload)
    except ValidationError:
        raise WorkSecretError(
            f"{NO_SESSIONS_TOKEN}: the work-item secret has no string 'sessions_token' field"
        ) from None
    if not decoded.sessions_token.strip():
        raise WorkSecretError(f"{NO_SESSIONS_TOKEN}: the work-item secret's 'sessions_token' is empty")
    return decoded


def encode_work_secret(sessions_token: str, api_base_url: str | None = None) -> str:
    """base64url JSON without padding, as the hosted API issues it."""
    payload: dict[str, str] = {"sessions_token": sessions_token}
    if api_base_url is not None:
        payload["api_base_url"] = api_base_url
    return base64.urlsafe_b64encode(json.dumps(payload).encode("utf-8")).decode("ascii").rstrip("=")
