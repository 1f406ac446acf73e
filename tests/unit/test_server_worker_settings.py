"""The serve settings reach the HTTP protocol: in the serving process through ``protocol_class``, and in each
of several worker processes through the settings ``serve`` hands them (``app_from_env``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsync.server import worker
from memsync.server.protocol import HTTP_IMPLEMENTATIONS, protocol_class


def test_the_protocol_class_carries_the_bounds_and_refuses_bad_ones() -> None:
    cls = protocol_class(7.0, "httptools", 0.2)
    assert issubclass(cls, HTTP_IMPLEMENTATIONS["httptools"])
    assert (cls.read_timeout_s, cls.max_loop_lag_s) == (7.0, 0.2)
    assert protocol_class(7.0, "httptools", 0).max_loop_lag_s == 0  # off
    with pytest.raises(ValueError, match="lag bound"):
        protocol_class(7.0, "httptools", -0.1)
    with pytest.raises(ValueError, match="read timeout"):
        protocol_class(0, "httptools")


def test_a_worker_process_takes_the_bounds_from_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = worker.ServeSettings(
        database=str(tmp_path / "store.db"),
        public_url="http://store.test",
        admin_key_name="default",
        cursor_ttl_s=3600,
        max_memories_per_store=100,
        session_token_ttl_s=3600,
        db_pool_size=2,
        read_timeout_s=7.0,
        http="httptools",
        max_loop_lag_s=0.2,
    )
    assert worker.ServeSettings.from_env(settings.to_env()) == settings
    monkeypatch.setenv(worker.SETTINGS_ENV, settings.to_env())
    monkeypatch.setenv(worker.ADMIN_KEY_ENV, "sk-ant-admin-test-worker-settings-0123456789")
    monkeypatch.setattr(worker, "configure_logging", lambda *_: None)  # the test process keeps its logging
    settled: list[bool] = []
    monkeypatch.setattr(worker, "settle_heap", lambda: settled.append(True))  # and its garbage collector
    cls = HTTP_IMPLEMENTATIONS["httptools"]
    for name in ("read_timeout_s", "max_loop_lag_s"):
        monkeypatch.setattr(cls, name, getattr(cls, name))  # put back after the test
    app = worker.app_from_env()
    try:
        assert (cls.read_timeout_s, cls.max_loop_lag_s) == (7.0, 0.2)
        assert settled == [True]
    finally:
        app.state.service.db.close()
