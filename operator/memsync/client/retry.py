"""When to retry a store request and how long to wait first: pure functions over plain data.

Rules (those of the official SDKs, except that memsync never retries a 409 on its own: a 409 is an answer
about the data, not a transient failure):

- retried: 408, 429, every status >= 500, and connection failures or timeouts (``status=None``);
- a response header ``x-should-retry: true|false`` overrides that choice either way;
- the budget is ``max_retries`` retries after the first attempt;
- the delay is the server's ``retry-after-ms``, else ``retry-after`` (seconds, or an HTTP date), when it is
  between 0 and 60 s, plus up to 50 % jitter (a server that sheds a burst with ``Retry-After: 1`` must not
  get the whole burst back in the same instant); otherwise exponential backoff from 0.5 s doubling per retry,
  capped at 8 s, minus up to 25 % jitter.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping

__all__ = [
    "BACKOFF_CAP_S",
    "BACKOFF_INITIAL_S",
    "MAX_SERVER_DELAY_S",
    "backoff_delay",
    "retry_delay",
    "server_delay",
    "should_retry",
]

BACKOFF_INITIAL_S = 0.5
BACKOFF_CAP_S = 8.0
JITTER_FRACTION = 0.25
#: At most this fraction of a server-given delay is added to it, to spread the callers it refused together.
SERVER_JITTER_FRACTION = 0.5
# A server-given delay above this is not honoured (a misconfigured proxy must not stall a sync for hours);
# the computed backoff applies instead.
MAX_SERVER_DELAY_S = 60.0

RETRYABLE_STATUSES = frozenset({408, 429})


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        # plain dicts in tests are not case-insensitive the way httpx.Headers is
        for key, candidate in headers.items():
            if key.lower() == name:
                return candidate
    return value


def should_retry(status: int | None, headers: Mapping[str, str]) -> bool:
    """Whether this outcome is worth another attempt. ``status=None`` means no response (connection error)."""
    override = _header(headers, "x-should-retry")
    if override is not None:
        lowered = override.strip().lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
    if status is None:
        return True
    return status in RETRYABLE_STATUSES or status >= 500


def server_delay(headers: Mapping[str, str], *, now: float) -> float | None:
    """The delay the server asked for, in seconds, or None when it asked for none we honour.

    ``now`` is the current time as a Unix timestamp (for an HTTP-date ``retry-after``).
    """
    delay: float | None = None
    retry_after_ms = _header(headers, "retry-after-ms")
    if retry_after_ms is not None:
        try:
            delay = float(retry_after_ms) / 1000.0
        except ValueError:
            delay = None
    if delay is None:
        retry_after = _header(headers, "retry-after")
        if retry_after is not None:
            try:
                delay = float(retry_after)
            except ValueError:
                try:
                    when = email.utils.parsedate_to_datetime(retry_after)
                except (TypeError, ValueError, IndexError):
                    when = None
                if when is not None and when.tzinfo is not None:
                    delay = max(0.0, when.timestamp() - now)
    if delay is None or not math.isfinite(delay) or delay < 0 or delay > MAX_SERVER_DELAY_S:
        return None
    return delay


def backoff_delay(retry_index: int, *, jitter: float) -> float:
    """Exponential backoff for retry number ``retry_index`` (0 for the first retry).

    ``jitter`` in [0, 1) removes that fraction of 25 % from the delay (callers pass ``random.random()``).
    """
    base = min(BACKOFF_INITIAL_S * (2.0 ** min(retry_index, 32)), BACKOFF_CAP_S)
    return base * (1.0 - JITTER_FRACTION * min(max(jitter, 0.0), 1.0))


def retry_delay(
    status: int | None,
    headers: Mapping[str, str],
    retries_done: int,
    max_retries: int,
    *,
    now: float,
    jitter: float,
) -> float | None:
    """Seconds to wait before the next attempt, or None when the outcome must be reported as is.

    ``retries_done`` is how many retries were already made for this request (0 after the first attempt);
    ``jitter`` in [0, 1) spreads the delay (callers pass ``random.random()``).
    """
    if retries_done >= max_retries or not should_retry(status, headers):
        return None
    asked = server_delay(headers, now=now)
    if asked is not None:
        spread = asked * SERVER_JITTER_FRACTION * min(max(jitter, 0.0), 1.0)
        return min(asked + spread, max(asked, MAX_SERVER_DELAY_S))
    return backoff_delay(retries_done, jitter=jitter)
