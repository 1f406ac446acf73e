"""Runs the coverage-guided fuzz targets (``fuzz_*.py`` beside this file) under atheris, each in a process.

    python tests/fuzz/runner.py run [--seconds 30] [--jobs 2] [--merge] [--seed N] [TARGET...]
    python tests/fuzz/runner.py run --ci [--jobs 2] [TARGET...]   # make test's phase: fixed runs and seed
    python tests/fuzz/runner.py repro TARGET FILE|DIR...     # replay inputs without the fuzzer
    python tests/fuzz/runner.py list                         # the targets and their properties

``run`` fuzzes every target (or those named) for ``--seconds`` each, ``--jobs`` at a time, starting from its
corpus in ``corpus/<target>/`` (read, never written, unless ``--merge``). Each target's process instruments
every ``memsync`` module it imports, so libFuzzer sees which branches an input reached. At the end it prints a
table: executions, coverage (libFuzzer's ``cov``: instrumented branches reached; ``ft``: features) when the
corpus was loaded and at the end, and the new inputs that reached more. ``--merge`` keeps those in the corpus
(libFuzzer's merge: only the inputs that add coverage). Any input that broke a target's property (an
exception, a hang past ``--timeout``, memory past ``--rss-mb``) fails the run: the target's output, the input
(printed and saved under ``--artifacts``) and the command that replays it are printed.

``--ci`` is the bounded run CI makes (``make fuzz-ci``): each target executes its fixed number of inputs
(``CI_RUNS``, about 25 s of this project's 2-core CI machine) from its corpus with the fixed seed ``CI_SEED``
and Python's hash seed fixed, so the same commit fuzzes the same inputs on every run and a result cannot
change between two runs of one commit (a finding is a finding of the change). ``--cap`` seconds bound a target
whatever the machine; a target cut short by it says so in the table.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
ARTIFACT_KINDS = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")
_STATS = re.compile(r"^#(\d+)\s+(INITED|DONE)\s.*?cov: (\d+) ft: (\d+) corp: (\d+)/")
_RATE = re.compile(r"exec/s: (\d+)")
_SEED = re.compile(r"INFO: Seed: (\d+)")
_UNITS = re.compile(r"^stat::number_of_executed_units: *(\d+)")

#: Inputs each target executes in CI (``--ci``): 25 s at the exec/s a target showed in the slower of two short
#: runs on a loaded 2-core machine (``run``'s table): at most about 25 s each on CI, the phase under 2.5 min.
CI_RUNS: dict[str, int] = {
    "client_page": 6_000,
    "health": 39_000,
    "ids": 459_000,
    "local_paths": 116_000,
    "memory_paths": 72_000,
    "merge": 79_000,
    "report": 29_000,
    "server_bodies": 5_000,
    "server_listing": 134_000,
    "stores_env": 198_000,
    "work_secret": 1_306_000,
}
CI_SEED = 44
CI_CAP_S = 45


def targets() -> list[str]:
    return sorted(p.stem.removeprefix("fuzz_") for p in HERE.glob("fuzz_*.py"))


def statement(name: str) -> str:
    """The first paragraph of a target's docstring: what it checks."""
    text = (HERE / f"fuzz_{name}.py").read_text(encoding="utf-8")
    doc = text.split('"""', 2)[1] if text.startswith('"""') else ""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


# --- one target, in the child process ---------------------------------------------------------------------


def child(name: str, libfuzzer_args: list[str]) -> None:
    """Fuzz one target in this process (libFuzzer exits the process when it is done)."""
    import atheris

    sys.path.insert(0, str(HERE))
    with atheris.instrument_imports(include=["memsync"]):
        module = importlib.import_module(f"fuzz_{name}")
    # libFuzzer runs its argv[0] again for a merge: the launcher that runs this target (``_run``)
    argv0 = os.environ.get("MEMSYNC_FUZZ_SELF", sys.argv[0])
    atheris.Setup([argv0, *libfuzzer_args], module.test_one_input)
    atheris.Fuzz()


def repro(name: str, paths: list[str]) -> int:
    """Replay inputs through the target without the fuzzer: a broken property raises with its traceback."""
    sys.path.insert(0, str(HERE))
    module = importlib.import_module(f"fuzz_{name}")
    files = [f for p in map(Path, paths) for f in (sorted(p.iterdir()) if p.is_dir() else [p])]
    failed = 0
    for path in files:
        data = path.read_bytes()
        try:
            module.test_one_input(data)
        except Exception:
            failed += 1
            print(f"{path}: {_shown(data)}", file=sys.stderr)
            traceback.print_exc()
    print(f"{name}: {len(files)} input(s) replayed, {failed} broke the property")
    return 1 if failed else 0


# --- the run, in the parent -------------------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    returncode: int = 0
    seconds: float = 0.0
    runs: int = 0
    rate: int = 0
    seed: str = ""
    cov: tuple[int, int] = (0, 0)  # when the corpus was loaded, at the end
    ft: tuple[int, int] = (0, 0)
    corpus: int = 0
    new: int = 0
    kept: int | None = None  # --merge: inputs added to the corpus
    capped: bool = False  # --ci: stopped by --cap before its runs
    artifacts: list[Path] = field(default_factory=list)
    log: str = ""

    @property
    def broken(self) -> bool:
        return self.returncode != 0 or bool(self.artifacts)


def _parse(outcome: Outcome) -> None:
    for line in outcome.log.splitlines():
        if m := _SEED.search(line):
            outcome.seed = m.group(1)
        if m := _UNITS.match(line):
            outcome.runs = int(m.group(1))
        m = _STATS.match(line)
        if m is None:
            continue
        _, stage, cov, ft, corp = m.groups()
        if stage == "INITED":
            outcome.cov, outcome.ft = (int(cov), int(cov)), (int(ft), int(ft))
        else:
            outcome.cov, outcome.ft = (outcome.cov[0], int(cov)), (outcome.ft[0], int(ft))
            outcome.corpus = int(corp)
            if rate := _RATE.search(line):
                outcome.rate = int(rate.group(1))


def _run(name: str, args: list[str], scratch: Path) -> subprocess.CompletedProcess[str]:
    """One target's process, its output in order; its temporary files (a target's database...) in
    ``scratch``, which goes with the run; Python's hash seed fixed (a set's order may steer a branch)."""
    scratch.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "_child", name, "--"]
    # libFuzzer's merge runs the process's argv[0] with its own flags: an executable that is this target
    launcher = scratch / f"fuzz-{name}"
    launcher.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n', encoding="utf-8")
    launcher.chmod(0o755)
    return subprocess.run(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        check=False,
        env={**os.environ, "TMPDIR": str(scratch), "PYTHONHASHSEED": "0", "MEMSYNC_FUZZ_SELF": str(launcher)},
    )


def fuzz_one(name: str, opts: argparse.Namespace, work: Path) -> Outcome:
    corpus = CORPUS / name
    corpus.mkdir(parents=True, exist_ok=True)
    new, artifacts = work / name / "new", Path(opts.artifacts) / name
    new.mkdir(parents=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    for old in artifacts.iterdir():  # the inputs an earlier run saved are not this run's findings
        if old.name.startswith(ARTIFACT_KINDS):
            old.unlink()
    budget = [f"-runs={CI_RUNS[name]}", f"-max_total_time={opts.cap}"] if opts.ci else []
    args = [
        *(budget or [f"-max_total_time={opts.seconds}"]),
        f"-timeout={opts.timeout}",
        f"-rss_limit_mb={opts.rss_mb}",
        f"-max_len={opts.max_len}",
        f"-artifact_prefix={artifacts}/",
        "-print_final_stats=1",
        *([f"-seed={opts.seed}"] if opts.seed is not None else []),
        *([f"-dict={d}"] if (d := HERE / "dicts" / f"{name}.dict").exists() else []),
        str(new),
        str(corpus),
    ]
    started = time.monotonic()
    done = _run(name, args, work / name / "tmp")
    outcome = Outcome(name, done.returncode, time.monotonic() - started, log=done.stdout)
    _parse(outcome)
    outcome.capped = opts.ci and not outcome.broken and outcome.runs < CI_RUNS[name]
    outcome.new = sum(1 for _ in new.iterdir())
    outcome.artifacts = sorted(p for p in artifacts.iterdir() if p.name.startswith(ARTIFACT_KINDS))
    if opts.merge and not outcome.broken and outcome.new:
        before = sum(1 for _ in corpus.iterdir())
        merged = _run(
            name, ["-merge=1", f"-max_len={opts.max_len}", str(corpus), str(new)], work / name / "tmp"
        )
        outcome.kept = sum(1 for _ in corpus.iterdir()) - before
        if merged.returncode != 0:
            outcome.log += merged.stdout
            outcome.returncode = merged.returncode
    return outcome


def _shown(data: bytes, limit: int = 400) -> str:
    text = repr(data[:limit]) + (f" ... ({len(data)} bytes)" if len(data) > limit else "")
    return f"{text}\n  base64: {base64.b64encode(data).decode('ascii')}"


def report_failure(outcome: Outcome) -> None:
    """What broke (the exception and its traceback, or libFuzzer's report), the input, how to replay it."""
    lines = [line for line in outcome.log.splitlines() if not line.startswith("INFO: Instrumenting")]
    start = next((i for i, line in enumerate(lines) if "=== Uncaught Python exception" in line), None)
    if start is None:
        start = next(
            (i for i, line in enumerate(lines) if "ERROR: libFuzzer" in line), max(0, len(lines) - 60)
        )
    print(f"\n=== fuzz target {outcome.name} FAILED (exit {outcome.returncode}) ===", file=sys.stderr)
    print(f"property: {statement(outcome.name)}", file=sys.stderr)
    print("\n".join(lines[start : start + 120]), file=sys.stderr)
    runner = os.path.relpath(__file__)
    for artifact in outcome.artifacts:
        print(f"input ({artifact}):\n  {_shown(artifact.read_bytes())}", file=sys.stderr)
        print(f"replay: {sys.executable} {runner} repro {outcome.name} {artifact}", file=sys.stderr)
    if not outcome.artifacts:
        print("(libFuzzer wrote no input: see its output above)", file=sys.stderr)


def table(outcomes: list[Outcome]) -> str:
    rows = [
        ("target", "result", "seconds", "runs", "exec/s", "cov", "ft", "corpus", "new", "kept"),
        *(
            (
                o.name,
                "FAILED" if o.broken else ("capped" if o.capped else "ok"),
                f"{o.seconds:.0f}",
                str(o.runs),
                str(o.rate),
                f"{o.cov[0]}->{o.cov[1]}",
                f"{o.ft[0]}->{o.ft[1]}",
                str(o.corpus),
                str(o.new),
                "-" if o.kept is None else str(o.kept),
            )
            for o in outcomes
        ),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def run(opts: argparse.Namespace) -> int:
    names = opts.targets or targets()
    unknown = sorted(set(names) - set(targets()))
    if unknown:
        print(f"unknown fuzz target(s): {', '.join(unknown)}; known: {', '.join(targets())}", file=sys.stderr)
        return 2
    try:
        import atheris  # noqa: F401
    except ImportError as exc:
        print(
            f"atheris cannot be imported ({exc}): `make install` installs it on Linux x86_64 with CPython "
            "3.11-3.13 (its wheels); elsewhere it builds only with clang's libFuzzer",
            file=sys.stderr,
        )
        return 2
    if opts.ci:
        opts.seed = CI_SEED if opts.seed is None else opts.seed
        each = f"its CI runs (at most {opts.cap} s), seed {opts.seed}"
    else:
        each = f"{opts.seconds} s"
    print(f"fuzzing {len(names)} target(s), {each} each, {opts.jobs} at a time", flush=True)
    with tempfile.TemporaryDirectory(prefix="memsync-fuzz-") as tmp, ThreadPoolExecutor(opts.jobs) as pool:
        futures = [pool.submit(fuzz_one, name, opts, Path(tmp)) for name in names]
        outcomes = []
        for future in futures:
            outcome = future.result()
            outcomes.append(outcome)
            seed = f", seed {outcome.seed}" if outcome.seed else ""
            print(f"  {outcome.name}: {'FAILED' if outcome.broken else 'ok'}{seed}", flush=True)
    for outcome in outcomes:
        if outcome.broken:
            report_failure(outcome)
    print("\n" + table(outcomes))
    capped = [o.name for o in outcomes if o.capped]
    if capped:  # the machine is slower than CI_RUNS assumes: fewer inputs were tried, nothing else changes
        print(f"\ncut short by --cap {opts.cap} s before their CI runs: {', '.join(capped)}")
    broken = [o.name for o in outcomes if o.broken]
    if broken:
        print(f"\nfuzzing broke {len(broken)} target(s): {', '.join(broken)}", file=sys.stderr)
        return 1
    if opts.merge:
        print(f"\nnew corpus entries are in {os.path.relpath(CORPUS)}/<target>/ (see `git status`)")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["_child"]:
        name, rest = argv[1], argv[2:]
        child(name, rest[1:] if rest[:1] == ["--"] else rest)
        return 0
    parser = argparse.ArgumentParser(prog="runner.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fuzz = sub.add_parser("run", help="fuzz the targets")
    fuzz.add_argument("targets", nargs="*")
    fuzz.add_argument("--seconds", type=int, default=30, help="fuzzing time per target (default 30)")
    fuzz.add_argument("--jobs", type=int, default=2, help="targets fuzzed at once (default 2)")
    fuzz.add_argument("--timeout", type=int, default=10, help="seconds one input may take (default 10)")
    fuzz.add_argument("--rss-mb", type=int, default=2048, help="memory per target process (default 2048)")
    fuzz.add_argument("--max-len", type=int, default=8192, help="longest input in bytes (default 8192)")
    fuzz.add_argument("--seed", type=int, default=None, help="libFuzzer's seed (default: a new one, printed)")
    fuzz.add_argument("--merge", action="store_true", help="keep new inputs that add coverage in the corpus")
    fuzz.add_argument(
        "--ci", action="store_true", help=f"each target's CI_RUNS inputs, seed {CI_SEED} (make test's phase)"
    )
    fuzz.add_argument(
        "--cap", type=int, default=CI_CAP_S, help=f"--ci: seconds per target at most ({CI_CAP_S})"
    )
    fuzz.add_argument(
        "--artifacts",
        default=os.environ.get("MEMSYNC_FUZZ_ARTIFACTS", ".memsync/fuzz"),
        help="where inputs that broke a property are saved (default .memsync/fuzz)",
    )
    again = sub.add_parser("repro", help="replay inputs without the fuzzer")
    again.add_argument("target")
    again.add_argument("inputs", nargs="+")
    sub.add_parser("list", help="the targets and their properties")
    opts = parser.parse_args(argv)
    if opts.command == "list":
        for name in targets():
            print(f"{name}: {statement(name)}")
        return 0
    if opts.command == "repro":
        return repro(opts.target, opts.inputs)
    return run(opts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
