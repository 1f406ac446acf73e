"""The repository stands on its own: no comment, docstring, test or doc cites a document that is not in it
("reference §5.5", "design §7", "issue 5 §2", "memory-api.md"...). Sections are cited as links into
``docs/`` (for example ``docs/sync-semantics.md#deletes``), which this test also checks exist."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(REPO).as_posix()

# A section sign anywhere (a numbered section of some document) except in a cited RFC, a public standard;
# the outside documents by name; issue numbers of the tracker.
FORBIDDEN = re.compile(
    r"(?<!RFC \d{4} )§"
    r"|\b(?:reference|design|spec)\s+§"
    r"|memory-api(?:\.md)?"
    r"|\bissue\s+#?\d+"
    r"|\bContract\s+\d+",
    re.IGNORECASE,
)
DOC_LINK = re.compile(r"docs/([a-z0-9-]+\.md)#([a-z0-9-]+)")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".sh", ".json", ".tpl", ""}
SKIP_PARTS = {".git", ".venv", "node_modules", "__pycache__", "controlplane"}


def tracked_files() -> list[Path]:
    """The repository's tracked files (every file of the tree when it is not a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
        names = [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n]
        files = [REPO / n for n in names]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in REPO.rglob("*") if p.is_file()]
    return [
        p
        for p in files
        if p.suffix in TEXT_SUFFIXES
        and not SKIP_PARTS.intersection(p.relative_to(REPO).parts)
        and p.is_file()
        and not p.is_symlink()
    ]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def test_the_scan_sees_the_repository() -> None:
    names = {p.relative_to(REPO).as_posix() for p in tracked_files()}
    assert {"operator/memsync/agent/merge.py", "docs/sync-semantics.md", THIS} <= names


@pytest.mark.parametrize(
    "line",
    [
        "# content fetches per store (reference §5.5 step 6)",
        '"""Concurrency (design §7): stores sync in parallel."""',
        "One pipeline (issue 5 §3): the real parts chained",
        "see memory-api.md for the listing",
        "the report (Contract 3)",
        "# --- the push-only flush (§5.7) ---",
    ],
)
def test_the_pattern_catches_outside_citations(line: str) -> None:
    assert FORBIDDEN.search(line)


def test_the_pattern_leaves_plain_words_and_standards() -> None:
    for line in (
        "# RFC 9110 §7.6.1 hop-by-hop headers",
        "the sandbox Pod's owner reference sets blockOwnerDeletion",
        "(docs/sync-semantics.md#deletes)",
    ):
        assert not FORBIDDEN.search(line), line


def test_no_file_cites_a_document_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(REPO).as_posix()}:{n}: {line.strip()}"
        for path in tracked_files()
        if path.relative_to(REPO).as_posix() != THIS
        for n, line in enumerate(_text(path).splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert not found, "cite docs/<file>.md#<section> or say it in plain words:\n" + "\n".join(found)


def _anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for line in _text(doc).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^a-z0-9 -]", "", title).replace(" ", "-"))
    return out


def test_every_docs_link_points_at_a_section_that_exists() -> None:
    broken = []
    for path in tracked_files():
        for n, line in enumerate(_text(path).splitlines(), 1):
            for name, anchor in DOC_LINK.findall(line):
                doc = REPO / "docs" / name
                if not doc.is_file() or anchor not in _anchors(doc):
                    broken.append(f"{path.relative_to(REPO).as_posix()}:{n}: docs/{name}#{anchor}")
    assert not broken, "links to missing docs sections:\n" + "\n".join(broken)
