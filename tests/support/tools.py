"""helm, promtool and kwok for the tests, built from the pinned Go modules in tests/tools (``make tools``)
into a cache outside the clone. A test that needs one builds it on first use (a no-op stamp check once
built) and skips only when Go is absent and the tool is not built."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parents[1] / "tools" / "build.sh"
#: A cold build takes minutes; the tests that need a tool carry this timeout for their first run.
BUILD_TIMEOUT_S = 1800


def tool(name: str) -> Path:
    """The path of the built ``name`` (helm, promtool or kwok), building it if Go is installed."""
    check = subprocess.run([str(BUILD), name, "--check"], capture_output=True, text=True, check=False)
    if check.returncode == 0:
        return Path(check.stdout.strip().splitlines()[-1])
    if shutil.which("go") is None:
        pytest.skip(f"Go is not installed: {name} cannot be built from tests/tools/{name} (`make tools`)")
    built = subprocess.run(
        [str(BUILD), name], capture_output=True, text=True, check=False, timeout=BUILD_TIMEOUT_S
    )
    if built.returncode != 0:
        pytest.fail(f"building {name} failed:\n{built.stderr[-4000:]}")
    return Path(built.stdout.strip().splitlines()[-1])
