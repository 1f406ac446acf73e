"""The sync sidecar's health document, served as JSON at ``/status`` and read by the operator.

It carries counts, times and the last error's message: never file content, never a credential (store
errors are scrubbed of credentials by the client before they are built). ``healthy`` is False while the
last pass of any store failed (or left transfers to retry), True once every store synced cleanly again.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, field
from datetime import UTC, datetime
from typing import Final

from pydantic import TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass

from memsync.contracts.report import StoreCounts

STATUS_PATH: Final = "/status"
ERROR_LIMIT: Final = 512  # characters of the last error kept (a condition message stays short)


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


def decode_health(data: bytes | str) -> SyncHealth | None:
    """The document, or None when it is not one (a sidecar of another version, a proxy's error page)."""
    try:
        return _ADAPTER.validate_json(data)
    except ValidationError:
        return None


def rfc3339(timestamp: float) -> str:
    """A Unix time as RFC 3339 UTC with second precision (the way Kubernetes writes times)."""
    return datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
