"""Log lines carry RFC 3339 UTC timestamps in both formats."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import redirect_stderr
from datetime import datetime

import kopf
import pytest
from kopf._core.actions.loggers import ObjectLogger

from memsync.logs import LogFormat, configure_logging, rfc3339_utc

RFC3339_MS_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@pytest.fixture
def restore_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _emit(fmt: LogFormat) -> str:
    buf = io.StringIO()
    with redirect_stderr(buf):
        configure_logging("INFO", fmt)  # the handler binds sys.stderr when it is made
        logging.getLogger("memsync.test").info("hello", extra={"store_id": "memstore_x"})
    return buf.getvalue().strip()


def test_rfc3339_utc_is_utc_with_milliseconds_and_z() -> None:
    assert rfc3339_utc(0.0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339_utc(1_796_058_279.963_5) == "2026-11-30T17:04:39.963Z"


def test_json_log_time_is_rfc3339_utc(restore_root_logging: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")  # a local zone far from UTC must not leak into the stamp
    time.tzset()
    try:
        before = time.time()
        record = json.loads(_emit("json"))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert RFC3339_MS_UTC.match(record["time"]), record
    assert record["level"] == "INFO"
    assert record["logger"] == "memsync.test"
    assert record["store_id"] == "memstore_x"
    stamped = datetime.fromisoformat(record["time"].replace("Z", "+00:00")).timestamp()
    assert abs(stamped - before) < 5  # the instant itself, not local wall-clock time labelled UTC


def test_text_log_starts_with_rfc3339_utc(restore_root_logging: None) -> None:
    line = _emit("text")
    stamp, _, rest = line.partition(" ")
    assert RFC3339_MS_UTC.match(stamp), line
    assert "hello store_id=memstore_x" in rest


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_kopf_object_records_log_the_object_not_the_settings(
    restore_root_logging: None, fmt: LogFormat
) -> None:
    """kopf's per-object records carry its settings (not serialisable): one clean line, naming the object."""
    body = kopf.Body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
    settings = kopf.OperatorSettings()  # its thread pool holds a queue that cannot be copied
    buf = io.StringIO()
    with redirect_stderr(buf):
        configure_logging("INFO", fmt)
        ObjectLogger(body=body, settings=settings).info("Handler 'reconcile' succeeded.")
    out = buf.getvalue()
    assert "Logging error" not in out and "Traceback" not in out, out
    assert "OperatorSettings" not in out and "k8s_skip" not in out
    [line] = out.strip().splitlines()
    if fmt == "json":
        record = json.loads(line)
        assert record["object"] == "ns/p"
        assert record["message"] == "Handler 'reconcile' succeeded."
        assert "settings" not in record
    else:
        assert line.endswith("Handler 'reconcile' succeeded. object=ns/p"), line
