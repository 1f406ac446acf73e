"""Imports only go down: every import in the operator package respects the layers docs/design.md states.

Each module's imports are read with ``ast`` (module level and inside functions, ``TYPE_CHECKING`` blocks
included: they are dependencies too). A module may import from its own top-level package, from a package of
a lower layer, and from the shared ground (``logs``, ``pid1``, the package's ``__init__``); and no modules
import each other in a circle, however long.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import memsync

PACKAGE = Path(memsync.__file__).parent
DESIGN = PACKAGE.parent.parent / "docs" / "design.md"

#: Bottom to top, as docs/design.md lists them (``test_the_design_doc_states_these_layers`` keeps them equal).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("api",),
    ("contracts",),
    ("client", "server", "crd"),
    ("controller", "agent", "session"),
    ("status",),
    ("devtools",),
    ("cli",),
)
#: What every layer may import: the version (``memsync/__init__.py``), structured logs, PID 1's signals.
SHARED_GROUND = frozenset({"", "logs", "pid1"})
#: ``python -m memsync``: the entry point, above everything.
ENTRY_POINT = "__main__"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module, dotted
    line: int

    def __str__(self) -> str:
        return f"{self.source} imports {self.target} (line {self.line})"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(root: Path) -> tuple[set[str], list[Import]]:
    """Every module under the package ``root`` and every import of one of them by another."""
    paths = {module_name(root, path): path for path in sorted(root.rglob("*.py"))}
    found: list[Import] = []
    for name, path in paths.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            for target in _targets(node, package, paths):
                if target != name:
                    found.append(Import(name, target, getattr(node, "lineno", 0)))
    return set(paths), found


def _targets(node: ast.AST, package: list[str], modules: Mapping[str, Path]) -> Iterable[str]:
    if isinstance(node, ast.Import):
        return [_known(alias.name, modules) for alias in node.names if _known(alias.name, modules)]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    # ``from pkg import mod`` imports the module ``pkg.mod``; ``from mod import name`` imports ``mod``
    names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    return sorted({known for n in names if (known := _known(n, modules))})


def _known(name: str, modules: Mapping[str, Path]) -> str:
    """``name`` or its nearest enclosing module of the package; empty when it is outside the package."""
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts)


def package_of(module: str) -> str:
    """The top-level package (``memsync.agent.transfer.pull`` -> ``agent``); ``""`` for ``memsync`` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(package: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    if package == ENTRY_POINT:
        return len(layers)
    return next((i for i, names in enumerate(layers) if package in names), None)


def upward(found: Iterable[Import], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every import that does not go down: to a higher layer, or across to another package of its layer."""
    wrong = []
    for imp in found:
        source, target = package_of(imp.source), package_of(imp.target)
        if source == target or target in SHARED_GROUND:
            continue
        here, there = layer_of(source, layers), layer_of(target, layers)
        if here is None or there is None or there >= here:
            wrong.append(str(imp))
    return wrong


def circles(modules: Iterable[str], found: Iterable[Import]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in found:
        graph[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def stated_layers(text: str) -> tuple[tuple[str, ...], ...]:
    """The numbered list under "### Layers" in docs/design.md: ``1. `api` `` ... as package names."""
    section = text.split("### Layers", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\d+\. (.+)$", section, flags=re.MULTILINE)
    return tuple(tuple(re.findall(r"`(\w+)/`", row)) for row in rows)


# --- the checks seeing what they should -------------------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "memsync"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_upward_and_sideways_imports_are_named(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "api/__init__.py": "",
            "api/models.py": "def f() -> None:\n    from memsync.cli import tool\n",  # up, in a function
            # down, and to the shared ground
            "client/__init__.py": "from memsync.api import models\nfrom memsync import logs\n",
            "server/__init__.py": "from ..client import thing\n",  # across, relative
            "cli/__init__.py": "",
            "cli/tool.py": "import memsync.api.models\nfrom . import other\n",  # down; own package
            "cli/other.py": "",
            "logs.py": "",
        },
    )
    modules, found = imports_of(root)
    assert "memsync.api.models" in modules and len(found) == 6
    assert upward(found, LAYERS) == [
        "memsync.api.models imports memsync.cli.tool (line 2)",
        "memsync.server imports memsync.client (line 1)",
    ]


def test_circles_are_found_at_any_length(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "agent/__init__.py": "",
            "agent/a.py": "from memsync.agent import b\n",
            "agent/b.py": "from memsync.agent.c import x\n",
            "agent/c.py": "def f() -> None:\n    import memsync.agent.a\n",
            "agent/d.py": "from memsync.agent import a\n",
        },
    )
    modules, found = imports_of(root)
    assert circles(modules, found) == [["memsync.agent.a", "memsync.agent.b", "memsync.agent.c"]]


def test_a_package_in_no_layer_is_refused() -> None:
    assert upward([Import("memsync.newpart.x", "memsync.api.models", 3)], LAYERS) == [
        "memsync.newpart.x imports memsync.api.models (line 3)"
    ]


# --- the package ------------------------------------------------------------------------------------------


def test_the_design_doc_states_these_layers() -> None:
    assert stated_layers(DESIGN.read_text(encoding="utf-8")) == LAYERS


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    placed = {name for layer in LAYERS for name in layer} | SHARED_GROUND | {ENTRY_POINT}
    assert packages | modules <= placed, f"not in any layer: {sorted((packages | modules) - placed)}"


def test_imports_only_go_down() -> None:
    _, found = imports_of(PACKAGE)
    assert len(found) > 300, f"found only {len(found)} imports under {PACKAGE}"
    wrong = upward(found, LAYERS)
    assert not wrong, "imports that do not go down (docs/design.md#layers): " + "; ".join(wrong)


def test_no_module_imports_itself_through_others() -> None:
    modules, found = imports_of(PACKAGE)
    groups = circles(modules, found)
    named = [", ".join(str(i) for i in found if {i.source, i.target} <= set(group)) for group in groups]
    assert not groups, "import circles (each names its imports): " + " | ".join(named)
