"""No class in the operator package grows past ~300 lines: a large class is split by responsibility."""

from __future__ import annotations

import ast
from pathlib import Path

import memsync

MAX_CLASS_LINES = 300
PACKAGE = Path(memsync.__file__).parent


def class_sizes(root: Path) -> list[tuple[str, int]]:
    """Every class under ``root`` as (``path:Name``, lines from ``class`` to its last line)."""
    sizes = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                name = f"{path.relative_to(root.parent)}:{node.name}"
                sizes.append((name, node.end_lineno - node.lineno + 1))
    return sizes


def test_class_sizes_sees_every_class(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    (pkg / "big.py").write_text(f"class Big:\n{body}\n\nclass Small:\n    pass\n", encoding="utf-8")
    assert class_sizes(pkg) == [("pkg/big.py:Big", MAX_CLASS_LINES + 1), ("pkg/big.py:Small", 2)]


def test_no_class_over_the_limit() -> None:
    sizes = class_sizes(PACKAGE)
    assert len(sizes) > 50, f"found only {len(sizes)} classes under {PACKAGE}"
    over = [f"{name} has {lines} lines" for name, lines in sizes if lines > MAX_CLASS_LINES]
    assert not over, f"classes over {MAX_CLASS_LINES} lines (split them by responsibility): " + "; ".join(
        over
    )
