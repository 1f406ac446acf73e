"""Structured logging for every memsync command.

``text`` is for people at a terminal; ``json`` (one object per line, with the ``extra`` fields of each call)
is for log pipelines. Call sites pass context as ``extra={...}``: store ids, paths, counts, never secrets.
Both stamp each line with an RFC 3339 UTC time to the millisecond (``2026-11-30T17:04:39.963Z``).

kopf's per-object log records carry the operator's settings object and a skip flag as extras: both are
dropped (the settings cannot be serialised, and rendering them for every line is pure cost), and the
object the line is about is written as ``object`` (``namespace/name``).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

LogFormat = Literal["text", "json"]

_STANDARD_ATTRS = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
#: The extras kopf adds to every per-object record (its ``ObjectLogger``): never written as such.
_KOPF_ATTRS = frozenset({"settings", "k8s_skip", "k8s_ref"})


def _object_of(record: logging.LogRecord) -> str | None:
    """``namespace/name`` (or ``name``) of the object a kopf per-object record is about."""
    ref = getattr(record, "k8s_ref", None)
    if not isinstance(ref, dict) or not ref.get("name"):
        return None
    return f"{ref['namespace']}/{ref['name']}" if ref.get("namespace") else str(ref["name"])


def rfc3339_utc(created: float) -> str:
    """A log record's ``created`` time as RFC 3339 in UTC with milliseconds and ``Z``."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _JsonFormatter(JsonFormatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return rfc3339_utc(record.created)

    def add_fields(
        self, log_record: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        super().add_fields(log_record, record, message_dict)
        if (obj := _object_of(record)) is not None:
            log_record["object"] = obj


class _TextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` with the call's ``extra`` fields appended."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return rfc3339_utc(record.created)

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extras = {
            k: v for k, v in record.__dict__.items() if k not in _STANDARD_ATTRS and k not in _KOPF_ATTRS
        }
        if (obj := _object_of(record)) is not None:
            extras["object"] = obj
        if not extras:
            return base
        tail = " ".join(f"{k}={v}" for k, v in extras.items())
        return f"{base} {tail}"


def configure_logging(level: str = "INFO", fmt: LogFormat = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(
            _JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
                reserved_attrs=[*RESERVED_ATTRS, *_KOPF_ATTRS],
                timestamp=False,
            )
        )
    else:
        handler.setFormatter(_TextFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO, URL included; keep it at WARNING.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
