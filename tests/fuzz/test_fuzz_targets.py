"""The fuzz targets and their runner, in the ordinary test tiers (no fuzzing: each test takes seconds).

- every target has a corpus in the repository and a CI budget (``runner.CI_RUNS``);
- every input of every corpus still keeps its target's property (the corpus holds the inputs that found the
  bugs the targets found: a replay of them is the regression test of each, without the fuzzer);
- a target whose property breaks fails the runner's run, with the input saved, printed and replayable: what
  makes a finding fail CI (a copy of the runner fuzzes a target broken on purpose);
- ``--merge`` (``make fuzz``) keeps the inputs that reached new code in the corpus.

They need atheris (its ``FuzzedDataProvider`` turns an input into values): they skip where it is not
installed, naming it, and fail under CI (``CI`` set), which installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import runner

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _atheris() -> None:
    try:
        import atheris  # noqa: F401
    except ImportError as exc:
        why = f"atheris is not installed ({exc}): make install installs it on Linux x86_64, CPython 3.11-3.13"
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI must run the fuzz targets)")
        pytest.skip(why)


def _runner(*args: str, where: Path = HERE, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(where / "runner.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_every_target_has_a_corpus_and_a_ci_budget() -> None:
    assert len(runner.targets()) >= 11
    assert set(runner.CI_RUNS) == set(runner.targets())
    for name in runner.targets():
        assert runner.CI_RUNS[name] >= 1000, name
        assert runner.statement(name), f"fuzz_{name}.py states no property in its docstring"
        inputs = list((runner.CORPUS / name).iterdir())
        assert len(inputs) >= 5, f"{name}: its corpus holds {len(inputs)} input(s)"


@pytest.mark.parametrize("name", runner.targets())
def test_every_corpus_input_keeps_its_property(name: str) -> None:
    done = _runner("repro", name, str(runner.CORPUS / name))
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 broke the property" in done.stdout, done.stdout


BROKEN = '''"""Broken on purpose: an input that starts with '!' and holds 3 bytes or more breaks it."""

from harness import PropertyBroken


def test_one_input(data: bytes) -> None:
    if len(data) >= 3 and data[:1] == b"!":
        raise PropertyBroken(f"an input starting with '!': {data[:8]!r}")
'''


BRANCHY = '''"""Never broken: the path rules (instrumented, as every memsync module) have branches to find."""

from memsync.api.paths import path_violation


def test_one_input(data: bytes) -> None:
    path_violation(data.decode("utf-8", "replace"))
'''


def _copy_of_the_runner(tmp_path: Path, name: str, target: str) -> Path:
    """A runner beside one target of its own, whose corpus holds one input (``seed``)."""
    where = tmp_path / "fuzz"
    where.mkdir()
    for part in ("runner.py", "harness.py"):
        shutil.copy(HERE / part, where / part)
    (where / f"fuzz_{name}.py").write_text(target)
    (where / "corpus" / name).mkdir(parents=True)
    (where / "corpus" / name / "seed").write_bytes(b"ok")
    return where


def test_a_merge_keeps_the_inputs_that_reached_new_code(tmp_path: Path) -> None:
    """libFuzzer's merge runs its argv[0] again: before the runner gave it a launcher, that was runner.py
    itself, not executable, and every merge kept nothing (the long runs left no corpus)."""
    where = _copy_of_the_runner(tmp_path, "branchy", BRANCHY)
    done = _runner("run", "--seconds", "5", "--seed", "1", "--merge", "branchy", where=where)
    assert done.returncode == 0, done.stdout + done.stderr
    kept = [p.name for p in (where / "corpus" / "branchy").iterdir()]
    assert len(kept) > 1, done.stdout


def test_a_broken_property_fails_the_run_with_its_input_saved_and_replayable(tmp_path: Path) -> None:
    where = _copy_of_the_runner(tmp_path, "broken", BROKEN)
    artifacts = tmp_path / "artifacts"

    done = _runner("run", "--seconds", "60", "--seed", "1", "--artifacts", str(artifacts), where=where)

    assert done.returncode == 1, done.stdout + done.stderr
    saved = list((artifacts / "broken").glob("crash-*"))
    assert len(saved) == 1, done.stderr
    assert saved[0].read_bytes().startswith(b"!")
    assert "fuzz target broken FAILED" in done.stderr
    assert "PropertyBroken: an input starting with '!'" in done.stderr
    assert f"repro broken {saved[0]}" in done.stderr  # the command that replays it
    assert "base64: " in done.stderr  # the input itself, for a CI log whose files are gone
    assert any(line.split()[:2] == ["broken", "FAILED"] for line in done.stdout.splitlines()), done.stdout
    assert [p.name for p in (where / "corpus" / "broken").iterdir()] == ["seed"]  # read, never written

    replayed = _runner("repro", "broken", str(saved[0]), where=where)
    assert replayed.returncode == 1 and "1 broke the property" in replayed.stdout, replayed.stderr
    kept = _runner("repro", "broken", str(where / "corpus" / "broken"), where=where)
    assert kept.returncode == 0, kept.stderr
