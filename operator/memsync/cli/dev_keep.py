"""``memsync dev`` at stop: the files the store did not take are moved aside, never removed with the folder.

After a complete final flush the mounted folder is removed. Before that, every entry the store does not
hold is moved under ``DIR/refused/`` (the flush refused it: over the size limit, not UTF-8, a name that
cannot be a memory path, unreadable, a symlink or special file) or ``DIR/conflicts/`` (a local edit the
store did not take: it lost a conflict), keeping its path below the folder. ``plan_keep`` decides from
plain data; ``move_aside`` does the renames (``rename`` moves a symlink itself, never what it points to).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

Why = Literal["refused", "conflicts"]
KEPT_DIRS: Final[tuple[Why, ...]] = ("refused", "conflicts")


@dataclass(frozen=True)
class Kept:
    rel: str
    why: Why
    to: Path


def plan_keep(
    files: Mapping[str, str],
    baseline: Mapping[str, str],
    refused_shas: Mapping[str, str],
    blocked: Mapping[str, str],
) -> dict[str, Why]:
    """What to move aside, by relative path: ``files`` and ``baseline`` map paths to content hashes as the
    last scan and the saved state see them; ``blocked`` holds what the scan never syncs (why, by path)."""
    plan: dict[str, Why] = dict.fromkeys(blocked, "refused")
    for rel, sha in files.items():
        if refused_shas.get(rel) == sha:
            plan[rel] = "refused"
        elif baseline.get(rel) != sha:
            plan[rel] = "conflicts"
    # An entry inside a folder that is itself moved goes with it.
    return {rel: why for rel, why in plan.items() if not _below_any(rel, plan)}


def _below_any(rel: str, plan: Mapping[str, Why]) -> bool:
    parts = rel.split("/")
    return any("/".join(parts[:i]) in plan for i in range(1, len(parts)))


def free_name(target: Path) -> Path:
    """``target``, or ``target~N`` with the first N not taken (an earlier run kept a file of that name)."""
    candidate, n = target, 1
    while os.path.lexists(candidate):
        candidate = target.with_name(f"{target.name}~{n}")
        n += 1
    return candidate


def move_aside(folder: Path, base: Path, plan: Mapping[str, Why]) -> list[Kept]:
    """Move each planned entry from ``folder`` to ``base/<why>/<rel>``; what could not be moved is left."""
    kept: list[Kept] = []
    for rel, why in sorted(plan.items()):
        parent = base / why / rel
        parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = free_name(parent)
        try:
            (folder / rel).rename(target)
        except FileNotFoundError:
            continue
        kept.append(Kept(rel, why, target))
    return kept


def describe(kept: list[Kept]) -> list[str]:
    """The final summary's lines about the kept files (none when nothing was kept)."""
    if not kept:
        return []
    lines = [f"  {len(kept)} file(s) the store did not take were moved aside, not deleted:"]
    labels = {"refused": "refused", "conflicts": "lost a conflict"}
    lines.extend(f"    {_shown(k.rel)} ({labels[k.why]}) -> {_shown(str(k.to))}" for k in kept)
    return lines


def _shown(name: str) -> str:
    """A file name as printable text (a name that is not UTF-8 shows U+FFFD where its bad bytes are)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
