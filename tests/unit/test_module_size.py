"""No module in the operator package grows past 500 lines: a large module is split by role."""

from __future__ import annotations

from pathlib import Path

import memsync

MAX_MODULE_LINES = 500
PACKAGE = Path(memsync.__file__).parent


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
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by role): " + "; ".join(over)


def test_no_two_test_modules_share_a_name_outside_a_package() -> None:
    """pytest imports a test folder without ``__init__.py`` by its modules' bare names: two of them with one
    name (``tests/unit/test_liveness.py`` and ``tests/operator/test_liveness.py``) fail the whole run at
    collection, which a targeted run never shows."""
    tests = Path(__file__).resolve().parents[1]
    seen: dict[str, Path] = {}
    clashes = []
    for module in sorted(tests.rglob("test_*.py")):
        if (module.parent / "__init__.py").exists():
            continue  # a package: its modules are imported by their dotted names
        if module.name in seen:
            clashes.append(f"{seen[module.name].relative_to(tests)} and {module.relative_to(tests)}")
        seen.setdefault(module.name, module)
    assert clashes == []
