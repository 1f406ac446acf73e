"""No module in the operator package grows past 500 lines: a large module is split by role."""

from __future__ import annotations

from pathlib import Path

import memsync

MAX_MODULE_LINES = 500
PACKAGE = Path(memsync.__file__).parent

#: TEMPORARY: modules over the limit that other work is splitting right now (the controller's and the agent's
#: restructuring).
#: Remove each entry when its split lands; the test fails once an entry is no longer over the limit, so the
#: list cannot go stale.
BEING_SPLIT: frozenset[str] = frozenset(
    {
        "memsync/controller/handlers.py",
        "memsync/controller/status.py",
        "memsync/status/view.py",
    }
)


def module_sizes(root: Path) -> list[tuple[str, int]]:
    """Every module under ``root`` as (path relative to its parent, number of lines)."""
    return [
        (path.relative_to(root.parent).as_posix(), len(path.read_text(encoding="utf-8").splitlines()))
        for path in sorted(root.rglob("*.py"))
    ]


def test_module_sizes_sees_every_module(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    (pkg / "sub" / "small.py").write_text("y = 2\n", encoding="utf-8")
    assert module_sizes(pkg) == [("pkg/big.py", MAX_MODULE_LINES + 1), ("pkg/sub/small.py", 1)]


def test_no_module_over_the_limit() -> None:
    sizes = module_sizes(PACKAGE)
    assert len(sizes) > 100, f"found only {len(sizes)} modules under {PACKAGE}"
    over = [f"{name} has {lines} lines" for name, lines in sizes if lines > MAX_MODULE_LINES]
    over = [text for text in over if text.split(" ", 1)[0] not in BEING_SPLIT]
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by role): " + "; ".join(over)


def test_the_temporary_allowlist_names_only_modules_still_over_the_limit() -> None:
    sizes = dict(module_sizes(PACKAGE))
    done = sorted(name for name in BEING_SPLIT if sizes.get(name, 0) <= MAX_MODULE_LINES)
    assert not done, f"split already (take them off BEING_SPLIT): {done}"
