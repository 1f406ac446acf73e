"""A scripted stand-in for an AI agent, for tests and the demo: it edits memory files over time.

Run as the sandbox container's command: ``python -m memsync.devtools.scripted_agent [options]``.

It works on the store folders under the mount root (default ``/mnt/memory``): every sub-directory holding
the store marker file is a store; those named with ``--read-only`` are only read, never written. For
``--duration`` seconds it performs one operation every ``--interval`` seconds, chosen by a random generator
seeded with ``--seed`` (so the same seed and the same starting files give the same operations):

* ``churn`` (the default scenario): create a file, rewrite or append to one, or delete one;
* ``steady``: create one new file per tick and never delete (easy to count what landed).

Operations stay under ``--prefix`` inside each writable store (so two agents on one store never pick each
other's files), and only touch files under that prefix. Files are written the way an agent's file tool
writes them: open, write, close.

When done — or on SIGTERM, after finishing the current write and, with ``--term-linger N``, after N more
seconds of work (an agent that takes a while to stop) — it writes a JSON report and exits 0. The report
(``--report PATH``, written atomically; also printed on stdout as one line starting with
``agent-report: ``) holds, per writable store, the final local state (``files``: relative path -> SHA-256
of the content, every file under the store except the marker), what this agent wrote last (``written``),
what it deleted and did not recreate (``deleted``), and per read-only store the files it read. Put the
report outside the store folders (e.g. ``/tmp/agent-report.json``) so it never syncs.

``MEMSYNC_TEST_ROOT`` (test-only) is honoured as the sync agent honours it: every absolute path given here
(mount root, report) is resolved under that directory.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import FrameType
from typing import Any, Literal

import click

from memsync.api.constants import MARKER_FILENAME, MOUNT_ROOT
from memsync.api.hashing import sha256_bytes
from memsync.contracts import env

Scenario = Literal["churn", "steady"]
REPORT_PREFIX = "agent-report: "
_SYNC_TEMP = re.compile(r"^\.fs-[0-9a-f]{16}\.tmp$")  # the sync agent's own temp files
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo")


def resolve(path: str) -> Path:
    """An absolute path of the configuration, under ``MEMSYNC_TEST_ROOT`` when that is set (test-only)."""
    root = os.environ.get(env.TEST_ROOT)
    if root and path.startswith("/"):
        return Path(root) / PurePosixPath(path).relative_to("/")
    return Path(path)


@dataclass
class StoreDir:
    mount_path: str  # as the agent sees it, e.g. /mnt/memory/notes
    local: Path
    read_only: bool
    written: dict[str, str] = field(default_factory=dict)  # rel path -> sha256 of what we wrote last
    deleted: set[str] = field(default_factory=set)


@dataclass
class Stop:
    requested: bool = False
    linger_until: float | None = None

    def should_stop(self) -> bool:
        return self.requested and (self.linger_until is None or time.monotonic() >= self.linger_until)


def discover_stores(mount_root: str, read_only: tuple[str, ...], only: tuple[str, ...]) -> list[StoreDir]:
    """Store folders under the mount root (those with a marker file), or exactly ``only`` when given."""
    ro = {_mount_path(mount_root, name) for name in read_only}
    if only:
        paths = sorted({_mount_path(mount_root, name) for name in only} | ro)
    else:
        local_root = resolve(mount_root)
        names = sorted(p.name for p in local_root.iterdir() if (p / MARKER_FILENAME).is_file())
        paths = sorted({f"{mount_root.rstrip('/')}/{name}" for name in names} | ro)
    stores = []
    for path in paths:
        local = resolve(path)
        if not local.is_dir():
            raise click.ClickException(f"store folder {path} does not exist (looked at {local})")
        stores.append(StoreDir(mount_path=path, local=local, read_only=path in ro))
    return stores


def _mount_path(mount_root: str, name: str) -> str:
    return name if name.startswith("/") else f"{mount_root.rstrip('/')}/{name}"


def scan(store: StoreDir) -> dict[str, str]:
    """Every regular file under the store folder except the marker: rel path -> sha256 (no symlinks)."""
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(store.local):
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(store.local).as_posix()
            if rel == MARKER_FILENAME or _SYNC_TEMP.match(name) or full.is_symlink() or not full.is_file():
                continue
            try:
                files[rel] = sha256_bytes(full.read_bytes())
            except FileNotFoundError:  # removed by the sync agent while we looked
                continue
    return files


class ScriptedAgent:
    def __init__(
        self, stores: list[StoreDir], *, rng: random.Random, scenario: Scenario, prefix: str, name: str
    ) -> None:
        self.stores = stores
        self.writable = [s for s in stores if not s.read_only]
        self.rng = rng
        self.scenario = scenario
        self.prefix = prefix.strip("/")
        self.name = name
        self.tick = 0
        self.operations: list[str] = []
        self.sigterm_tick: int | None = None
        self.first_edit: str | None = None

    def _rel(self, leaf: str) -> str:
        return f"{self.prefix}/{leaf}" if self.prefix else leaf

    def _own_files(self, store: StoreDir) -> list[str]:
        base = store.local / self.prefix if self.prefix else store.local
        if not base.is_dir():
            return []
        found = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for fname in sorted(filenames):
                full = Path(dirpath) / fname
                rel = full.relative_to(store.local).as_posix()
                if (
                    rel != MARKER_FILENAME
                    and not _SYNC_TEMP.match(fname)
                    and full.is_file()
                    and not full.is_symlink()
                ):
                    found.append(rel)
        return found

    def _text(self, rel: str) -> str:
        words = " ".join(self.rng.choice(_WORDS) for _ in range(self.rng.randint(3, 12)))
        return f"# {rel}\n\n{self.name} tick {self.tick}: {words}\n"

    def _write(self, store: StoreDir, rel: str, data: str, *, append: bool = False) -> None:
        path = store.local / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if append else "w", encoding="utf-8") as fh:
            fh.write(data)
        store.written[rel] = sha256_bytes(path.read_bytes())
        store.deleted.discard(rel)

    def step(self) -> None:
        """One operation: create, edit or delete (churn), or create (steady); reads a read-only file too."""
        self.tick += 1
        try:
            self._step()
        except FileNotFoundError as exc:  # the sync agent removed it meanwhile (a remote delete)
            self.operations.append(f"skipped tick {self.tick}: {exc.filename} vanished")

    def _step(self) -> None:
        if self.tick == 1 and self.first_edit and self.writable:
            store = self.writable[0]
            self._write(store, self.first_edit, f"{self.name} rewrote this first\n")
            self.operations.append(f"rewrite {store.mount_path}/{self.first_edit}")
            return
        for ro in (s for s in self.stores if s.read_only):
            files = sorted(scan(ro))
            if files:
                (ro.local / self.rng.choice(files)).read_bytes()
        if not self.writable:
            return
        store = self.rng.choice(self.writable)
        existing = self._own_files(store)
        roll = self.rng.random()
        if self.scenario == "steady" or not existing or roll < 0.4:
            depth = self.rng.choice(("", "", "notes/", "notes/deep/"))
            rel = self._rel(f"{depth}{self.name}-{self.tick:04d}.md")
            self._write(store, rel, self._text(rel))
            self.operations.append(f"create {store.mount_path}/{rel}")
        elif roll < 0.65:
            rel = self.rng.choice(existing)
            self._write(store, rel, self._text(rel))
            self.operations.append(f"rewrite {store.mount_path}/{rel}")
        elif roll < 0.85:
            rel = self.rng.choice(existing)
            self._write(store, rel, f"- {self.name} tick {self.tick}\n", append=True)
            self.operations.append(f"append {store.mount_path}/{rel}")
        else:
            rel = self.rng.choice(existing)
            (store.local / rel).unlink()
            store.written.pop(rel, None)
            store.deleted.add(rel)
            self.operations.append(f"delete {store.mount_path}/{rel}")

    def report(self, *, interrupted: bool, seed: int) -> dict[str, Any]:
        return {
            "version": 1,
            "agent": self.name,
            "seed": seed,
            "scenario": self.scenario,
            "interrupted": interrupted,
            "ticks": self.tick,
            "sigterm_tick": self.sigterm_tick,
            "operations": self.operations,
            "stores": {
                s.mount_path: {
                    "files": scan(s),
                    "written": dict(sorted(s.written.items())),
                    "deleted": sorted(s.deleted),
                }
                for s in self.writable
            },
            "read_only": {s.mount_path: {"files": scan(s)} for s in self.stores if s.read_only},
        }


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--mount-root", default=MOUNT_ROOT, show_default=True, help="Where the store folders are.")
@click.option("--store", "only", multiple=True, help="A store folder (name under the mount root, or path).")
@click.option("--read-only", multiple=True, help="A store folder to read but never write (repeatable).")
@click.option("--duration", default=20.0, show_default=True, type=click.FloatRange(min=0), help="Seconds.")
@click.option("--interval", default=0.25, show_default=True, type=click.FloatRange(min=0.01), help="Seconds.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--scenario", default="churn", show_default=True, type=click.Choice(["churn", "steady"]))
@click.option("--prefix", default="", help="Work only under this sub-directory of each writable store.")
@click.option("--name", default="agent", show_default=True, help="Written into file names and contents.")
@click.option("--report", "report_path", default=None, help="Where to write the JSON report.")
@click.option("--first-edit", default=None, help="Rewrite this file of the first writable store at tick 1.")
@click.option(
    "--term-linger", default=0.0, type=click.FloatRange(min=0), help="Keep working N s after SIGTERM."
)
def main(  # noqa: PLR0913, PLR0917 - click passes every option
    mount_root: str,
    only: tuple[str, ...],
    read_only: tuple[str, ...],
    duration: float,
    interval: float,
    seed: int,
    scenario: Scenario,
    prefix: str,
    name: str,
    report_path: str | None,
    first_edit: str | None,
    term_linger: float,
) -> None:
    """Create, edit and delete memory files for a while, then report the intended final state."""
    stop = Stop()

    def on_term(signum: int, frame: FrameType | None) -> None:
        if not stop.requested:
            stop.requested = True
            agent.sigterm_tick = agent.tick
            stop.linger_until = time.monotonic() + term_linger if term_linger else None

    stores = discover_stores(mount_root, read_only, only)
    if not any(not s.read_only for s in stores):
        raise click.ClickException(f"no writable store folder under {mount_root}")
    agent = ScriptedAgent(stores, rng=random.Random(seed), scenario=scenario, prefix=prefix, name=name)  # noqa: S311
    agent.first_edit = first_edit
    signal.signal(signal.SIGTERM, on_term)
    end = time.monotonic() + duration
    while time.monotonic() < end and not stop.should_stop():
        agent.step()  # a signal arriving here only sets the flag: the write always completes
        next_tick = time.monotonic() + interval
        while time.monotonic() < next_tick and not stop.should_stop():
            time.sleep(min(0.05, max(next_tick - time.monotonic(), 0)))
    report = agent.report(interrupted=stop.requested, seed=seed)
    if report_path:
        write_report(resolve(report_path), report)
    sys.stdout.write(REPORT_PREFIX + json.dumps(report, sort_keys=True) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
