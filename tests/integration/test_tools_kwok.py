"""kwok, the simulated nodes of the fleet benchmark (``bench/operator_fleet.py``), is built from the pinned
Go module in tests/tools/kwok (``make tools``) at the version that module pins, and starts with the
benchmark's own configuration and Stages (with a clean HOME: kwok also reads ``~/.kwok/kwok.yaml``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.tools import BUILD_TIMEOUT_S, tool

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from fleet import stages  # noqa: E402


def pinned_version() -> str:
    text = (ROOT / "tests" / "tools" / "kwok" / "go.mod").read_text()
    found = re.search(r"^\s*sigs\.k8s\.io/kwok (v\S+)", text, re.MULTILINE)
    assert found, "tests/tools/kwok/go.mod does not pin sigs.k8s.io/kwok"
    return found.group(1)


def test_kwok_is_built_at_the_pinned_version() -> None:
    kwok = tool("kwok")
    assert kwok.parent.name == f"kwok-{pinned_version()}"
    out = subprocess.run([str(kwok), "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split()[:3] == ["kwok", "version", pinned_version()], out.stdout


def test_kwok_reads_the_benchmarks_configuration(tmp_path: Path) -> None:
    """kwok loads the options and finds Node and Pod Stages (else it warns first, or stops), then looks for
    the API server (none here: it says so)."""
    kwok = tool("kwok")
    config = tmp_path / "kwok.yaml"
    config.write_text(stages.kwok_config())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: not-a-secret}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    (tmp_path / "home").mkdir()
    proc = subprocess.Popen(
        [str(kwok), f"--kubeconfig={kubeconfig}", f"--config={config}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"HOME": str(tmp_path / "home")},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
    finally:
        proc.kill()
        proc.wait()
    assert "Failed to list nodes" in first and "127.0.0.1:1" in first, first
