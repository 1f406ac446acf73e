"""The sync sidecar's health document, served as JSON at ``/status`` and read by the operator.

It carries counts, times and the last error's message: never file content, never a credential (store
errors are scrubbed of credentials by the client before they are built). ``healthy`` is False while the
last pass of any store failed (or left transfers to retry), True once every store synced cleanly again.

The operator watches the document rather than polling it (a thousand running sessions polled every few
seconds cost a core). Every answer carries an ``ETag``: the ``tag`` of what the operator records from the
document (everything but each store's ``last_success``, which moves on every pass, changed or not):

- ``GET /status`` answers the document at once (200).
- ``GET /status?wait=S`` with ``If-None-Match: <tag>`` answers the document (200) as soon as its tag is not
  ``<tag>`` (at once if it already differs), or ``304 Not Modified`` after ``S`` seconds (at most
  ``MAX_WAIT_S``) if it still is. A sidecar that predates the watch answers the document at once without an
  ``ETag``; the operator then falls back to reading it every few seconds.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, field, replace
from datetime import UTC, datetime
from typing import Final

from pydantic import TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass

from memsync.contracts.report import StoreCounts

STATUS_PATH: Final = "/status"
ERROR_LIMIT: Final = 512  # characters of the last error kept (a condition message stays short)
#: The watch's query parameter (seconds to hold the request while nothing changed) and its bound.
WAIT_PARAM: Final = "wait"
MAX_WAIT_S: Final = 300.0


@dataclass
class StoreHealth:
    healthy: bool = True
    outcome: str = "pending"  # the last pass: synced, recovered, left, failed, pending (none yet)
    last_success: str | None = None  # RFC 3339 UTC of the last successful pass
    last_error: str | None = None
    failing_passes: int = 0  # consecutive passes that failed (or left transfers to retry)
    totals: StoreCounts = field(default_factory=StoreCounts)


@dataclass
class SyncHealth:
    healthy: bool
    stores: dict[str, StoreHealth] = field(default_factory=dict)


_ADAPTER: Final = TypeAdapter(SyncHealth)
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def encode_health(health: SyncHealth) -> bytes:
    """The document as UTF-8 JSON, whatever its texts hold: a lone surrogate (an error naming a file whose
    name was not UTF-8, as Python escapes it) cannot be UTF-8, so it is written as U+FFFD. (pydantic's own
    serializer raises on one in a value and writes bytes no UTF-8 reader takes for one in a key.)"""
    text = json.dumps(asdict(health), ensure_ascii=False, separators=(",", ":"))
    return _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8")


def tag(health: SyncHealth) -> str:
    """The document's entity tag (a quoted string, as HTTP writes it): it changes when anything the operator
    records changes (health, outcome, errors, totals), not when only a store's ``last_success`` moves."""
    recorded = replace(
        health, stores={sid: replace(h, last_success=None) for sid, h in health.stores.items()}
    )
    return f'"{hashlib.sha256(encode_health(recorded)).hexdigest()[:32]}"'


def wait_seconds(raw: str | None) -> float | None:
    """The ``wait`` query parameter as seconds (clamped to ``MAX_WAIT_S``); None when absent or not a
    non-negative number (the request is then answered at once)."""
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    if math.isnan(value) or value < 0:
        return None
    return min(value, MAX_WAIT_S)


def decode_health(data: bytes | str) -> SyncHealth | None:
    """The document, or None when it is not one (a sidecar of another version, a proxy's error page)."""
    try:
        return _ADAPTER.validate_json(data)
    except ValidationError:
        return None


def rfc3339(timestamp: float) -> str:
    """A Unix time as RFC 3339 UTC with second precision (the way Kubernetes writes times)."""
    return datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
