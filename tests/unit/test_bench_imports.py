"""Every benchmark under bench/ still imports: they are run by hand, so a refactor that moves a name they use
would otherwise only be found when somebody next measures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHES = sorted(p for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.name)
def test_bench_imports(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for entry in (ROOT / "tests", ROOT / "bench"):
        monkeypatch.syspath_prepend(str(entry))
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)  # runs the imports, not main()
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"


def test_there_are_benches() -> None:
    assert {p.name for p in BENCHES} >= {"store_load.py", "operator_scale.py", "sync_agent.py"}
