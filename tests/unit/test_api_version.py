"""The SessionMemory version is defined once (``models.VERSION``): every manifest, sample and doc that
names it names that one (docs/upgrade.md, which describes the move between versions, aside)."""

from __future__ import annotations

import re
from pathlib import Path

from memsync.crd.models import API_VERSION, GROUP
from memsync.crd.schema import build_crd

REPO = Path(__file__).resolve().parents[2]
HISTORY = {REPO / "docs" / "upgrade.md"}


def _named_versions() -> dict[str, set[str]]:
    files = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "manifests").rglob("*.yaml")]
    pattern = re.compile(re.escape(GROUP) + r"/(v\d+(?:alpha|beta)?\d*)\b")
    found: dict[str, set[str]] = {}
    for path in files:
        if path in HISTORY:
            continue
        versions = set(pattern.findall(path.read_text()))
        if versions:
            found[str(path.relative_to(REPO))] = versions
    return found


def test_every_manifest_and_doc_names_the_current_version() -> None:
    current = API_VERSION.split("/", 1)[1]
    named = _named_versions()
    assert "manifests/samples/sessionmemory.yaml" in named
    assert {path: v for path, v in named.items() if v != {current}} == {}


def test_the_crd_serves_exactly_that_version() -> None:
    versions = build_crd()["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
        (API_VERSION.split("/")[1], True, True)
    ]
