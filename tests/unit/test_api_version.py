"""The SessionMemory version is defined once (``models.VERSION``): every manifest, sample and doc that
names it names that one (docs/upgrade.md, which describes the move between versions, aside). The
AgentEnvironment has its own (``agentenv.VERSION``), and where one is named, that one is."""

from __future__ import annotations

import re
from pathlib import Path

from memsync.crd import agentenv
from memsync.crd.models import API_VERSION, GROUP
from memsync.crd.schema import build_crd

REPO = Path(__file__).resolve().parents[2]
HISTORY = {REPO / "docs" / "upgrade.md"}


_KINDS = re.compile(r"(?i)agentenvironment|sessionmemor")


def _names_agent_environment(text: str, start: int, end: int) -> bool:
    """Whether the version named at ``text[start:end]`` is an AgentEnvironment's: the kind mentioned nearest
    to it (before or after, e.g. ``kind:`` below it or the heading above it) is the AgentEnvironment."""
    nearest = min(
        _KINDS.finditer(text, max(0, start - 300), end + 300),
        key=lambda k: min(abs(k.start() - end), abs(start - k.end())),
        default=None,
    )
    return nearest is not None and nearest.group(0).lower() == "agentenvironment"


def _named_versions(*, agent_environment: bool = False) -> dict[str, set[str]]:
    files = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "manifests").rglob("*.yaml")]
    pattern = re.compile(re.escape(GROUP) + r"/(v\d+(?:alpha|beta)?\d*)\b")
    found: dict[str, set[str]] = {}
    for path in files:
        if path in HISTORY:
            continue
        text = path.read_text()
        versions = {
            m.group(1)
            for m in pattern.finditer(text)
            if _names_agent_environment(text, m.start(), m.end()) is agent_environment
        }
        if versions:
            found[str(path.relative_to(REPO))] = versions
    return found


def test_every_manifest_and_doc_names_the_current_version() -> None:
    current = API_VERSION.split("/", 1)[1]
    named = _named_versions()
    assert "manifests/samples/sessionmemory.yaml" in named
    assert {path: v for path, v in named.items() if v != {current}} == {}


def test_every_agent_environment_named_has_its_own_version() -> None:
    named = _named_versions(agent_environment=True)
    assert "manifests/samples/agentenvironment.yaml" in named
    assert {path: v for path, v in named.items() if v != {agentenv.VERSION}} == {}


def test_the_crd_serves_exactly_that_version() -> None:
    versions = build_crd()["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
        (API_VERSION.split("/")[1], True, True)
    ]
