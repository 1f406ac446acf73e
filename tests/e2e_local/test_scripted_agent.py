"""The scripted agent (``python -m memsync.devtools.scripted_agent``): deterministic, safe, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from memsync.api.hashing import marker_text, sha256_bytes
from memsync.devtools.scripted_agent import REPORT_PREFIX


def make_root(root: Path) -> None:
    for slug, store_id in (("notes", "memstore_a"), ("handbook", "memstore_b")):
        folder = root / "mnt" / "memory" / slug
        folder.mkdir(parents=True)
        (folder / ".anthropic-memory-store").write_text(marker_text(store_id))
    (root / "mnt/memory/notes/existing.md").write_text("from the store\n")
    (root / "mnt/memory/handbook/rules.md").write_text("be kind\n")


def agent(root: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "MEMSYNC_TEST_ROOT": str(root)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memsync.devtools.scripted_agent",
            "--read-only",
            "handbook",
            "--report",
            "/tmp/agent-report.json",
            *args,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], root: Path) -> dict[str, Any]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    from_file = json.loads((root / "tmp/agent-report.json").read_text())
    (line,) = [x for x in out.splitlines() if x.startswith(REPORT_PREFIX)]
    assert json.loads(line.removeprefix(REPORT_PREFIX)) == from_file
    return from_file


def tree(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): sha256_bytes(p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".anthropic-memory-store"
    }


def test_same_seed_same_result_and_read_only_untouched(tmp_path: Path) -> None:
    reports = []
    for run in ("one", "two"):
        root = tmp_path / run
        make_root(root)
        report = finish(agent(root, "--duration", "0.6", "--interval", "0.02", "--seed", "7"), root)
        notes = report["stores"]["/mnt/memory/notes"]
        assert notes["files"] == tree(root / "mnt/memory/notes")
        assert set(notes["written"]) <= set(notes["files"])
        assert not set(notes["deleted"]) & set(notes["files"])
        assert tree(root / "mnt/memory/handbook") == {"rules.md": sha256_bytes(b"be kind\n")}
        assert report["read_only"]["/mnt/memory/handbook"]["files"] == {
            "rules.md": sha256_bytes(b"be kind\n")
        }
        assert "/mnt/memory/handbook" not in report["stores"]
        assert report["interrupted"] is False
        reports.append(report)
    assert reports[0]["ticks"] > 5
    assert any(op.startswith(("rewrite", "append")) for op in reports[0]["operations"])
    assert any(op.startswith("delete") for op in reports[0]["operations"])
    # deterministic: same seed and starting files -> the same operations and the same final state
    # (the tick count depends on timing, so compare the common prefix of operations)
    n = min(reports[0]["ticks"], reports[1]["ticks"])
    assert reports[0]["operations"][:n] == reports[1]["operations"][:n]


def test_sigterm_finishes_and_reports(tmp_path: Path) -> None:
    make_root(tmp_path)
    proc = agent(tmp_path, "--duration", "60", "--interval", "0.05", "--scenario", "steady", "--prefix", "s1")
    folder = tmp_path / "mnt/memory/notes/s1"
    while not (folder.exists() and len(list(folder.rglob("*.md"))) >= 3):
        assert proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    report = finish(proc, tmp_path)
    assert report["interrupted"] is True
    notes = report["stores"]["/mnt/memory/notes"]
    assert notes["files"] == tree(tmp_path / "mnt/memory/notes")
    assert all(path.startswith("s1/") for path in notes["written"])
    assert len(notes["written"]) == report["ticks"]  # steady: one new file per tick, none deleted
    assert notes["deleted"] == []
