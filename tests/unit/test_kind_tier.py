"""How the kind tier is run: serially, apart from the xdist run, on a node image pinned by digest."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _recipe(target: str) -> list[str]:
    lines = (REPO / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_make_test_runs_the_kind_tier_apart_from_the_xdist_run() -> None:
    pytest_lines = [line for line in _recipe("test") if "/pytest" in line]
    parallel = [line for line in pytest_lines if re.search(r"\s-n\s*[2-9]", line)]
    assert parallel, pytest_lines
    for line in parallel:
        marks = re.search(r'-m "([^"]*)"', line)
        assert marks and "not kind" in marks.group(1), f"the xdist run must deselect the kind tier: {line}"
    serial = [line for line in pytest_lines if line not in parallel]
    assert any("-m kind" in line and "tests/kind" in line for line in serial), pytest_lines


def test_the_kind_timeout_covers_the_test_only() -> None:
    """pytest-timeout's func_only: the session fixture's cluster setup is not charged to a test."""
    tree = ast.parse((REPO / "tests/kind/test_kind_scenarios.py").read_text())
    marks = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
    ]
    (value,) = marks
    timeouts = [
        call
        for call in ast.walk(value)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "timeout"
    ]
    assert timeouts, "the kind tier needs a timeout"
    for call in timeouts:
        func_only = {k.arg: k.value for k in call.keywords}.get("func_only")
        assert isinstance(func_only, ast.Constant) and func_only.value is True


def test_the_kind_node_image_is_1_36_pinned_by_digest() -> None:
    config = yaml.safe_load((REPO / "kind-config.yaml").read_text())
    (image,) = {node["image"] for node in config["nodes"]}
    assert re.fullmatch(r"kindest/node:v1\.36\.\d+@sha256:[0-9a-f]{64}", image), image
