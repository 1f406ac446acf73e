"""The operator's memory-trace debugging aid (``MEMSYNC_TRACEMALLOC``)."""

from __future__ import annotations

import os
import signal
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.controller import memtrace


@pytest.fixture
def restore_tracing() -> Iterator[None]:
    before = signal.getsignal(signal.SIGUSR2)
    yield
    tracemalloc.stop()
    signal.signal(signal.SIGUSR2, before)


def test_off_without_the_variable() -> None:
    assert memtrace.install_from_env({}) is None
    assert not tracemalloc.is_tracing()


def test_sigusr2_writes_the_largest_allocation_sites(tmp_path: Path, restore_tracing: None) -> None:
    target = tmp_path / "heap.txt"
    assert memtrace.install_from_env({memtrace.ENV_PATH: str(target), memtrace.ENV_FRAMES: "4"}) == target
    assert tracemalloc.is_tracing() and tracemalloc.get_traceback_limit() == 4
    kept = [bytearray(4096) for _ in range(256)]  # 1 MiB from one line of this file
    os.kill(os.getpid(), signal.SIGUSR2)
    text = target.read_text()
    assert text.startswith("traced: ")
    [line] = [ln for ln in text.splitlines() if "test_memtrace.py" in ln and "MiB" in ln][:1]
    assert float(line.split()[0]) >= 1.0, line
    assert "by traceback (innermost last):" in text
    assert not (tmp_path / "heap.txt.partial").exists()
    del kept
