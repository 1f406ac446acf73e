"""``memsync store export``: every memory of a store as a file below a folder, never over a file by surprise.

A folder that already holds anything is refused unless the command says what to do with what is there:
``--merge`` writes only the files that are missing (a file that is there with the same content counts as
exported; one with other content is left as it is and listed: exit 7), ``--force`` writes every memory over
whatever file has its path. Every write goes through the sync agent's safe filesystem layer: no symlink is
followed, a path that could leave the folder is refused, and a file appears whole or not at all.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import click

from memsync import pid1
from memsync.agent.localfs import StoreRoot, root_is_empty
from memsync.api.constants import MARKER_FILENAME
from memsync.api.hashing import sha256_bytes
from memsync.api.models import Memory
from memsync.api.paths import path_violation
from memsync.cli.failures import CliError, ExitCode, interrupted
from memsync.cli.params import ID, NonEmptyPath
from memsync.cli.store.admin import admin_options, run_with_client
from memsync.cli.store.transfer import (
    GaveUp,
    Patience,
    each_memory,
    give_up_option,
    progress_of,
    progress_option,
    quiet_transport_retries,
    stopped,
)
from memsync.client import StoreClient

NAME_MAX: Final = 255  # bytes in one file name on the usual Linux filesystems
EXPORT_DIR_MODE: Final = 0o755
EXPORT_FILE_MODE: Final = 0o644

#: What to do with a file already at a memory's path: refuse a folder that holds anything, write only
#: what is missing, or write over it.
Existing = Literal["refuse", "merge", "force"]


class UnsafePathError(ValueError):
    pass


def export_segments(memory_path: str) -> list[str]:
    """The path's segments if it is safe to write below the export directory; else UnsafePathError."""
    violation = path_violation(memory_path)
    if violation is not None:
        raise UnsafePathError(violation.message)
    segments = memory_path[1:].split("/")
    for seg in segments:
        if "\x00" in seg or seg in ("", ".", ".."):
            raise UnsafePathError(f"segment {seg!r} is not allowed")
        if len(seg.encode("utf-8")) > NAME_MAX:
            raise UnsafePathError(f"segment of {len(seg.encode('utf-8'))} bytes exceeds {NAME_MAX}")
    if segments[-1] == MARKER_FILENAME and len(segments) == 1:
        raise UnsafePathError("the marker file's name is reserved")
    return segments


def write_below(root_fd: int, segments: list[str], data: bytes, existing: Existing = "force") -> bool:
    """Write ``data`` at ``root/segments...`` without following any symlink, through the sync agent's safe
    filesystem layer: each directory is opened with O_NOFOLLOW relative to its parent's fd (created when
    missing), and the file is written to a temp name and renamed into place. With ``merge``, a file that is
    there already is left as it is: True when it holds ``data`` (nothing to write), False when it differs.
    """
    rel = "/".join(segments)
    with StoreRoot(os.dup(root_fd), Path(), dir_mode=EXPORT_DIR_MODE, file_mode=EXPORT_FILE_MODE) as root:
        if existing != "merge":
            root.write_bytes(rel, data)
            return True
        there = root.sha_of(rel)
        if there is None and root.replace_if(rel, data, None):
            return True
        return (there or root.sha_of(rel)) == sha256_bytes(data)


@dataclass
class ExportResult:
    written: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)  # (memory path, why)
    kept: list[str] = field(default_factory=list)  # --merge: a file with other content was there

    def summary(self, store_id: str, directory: Path) -> str:
        kept = f", {len(self.kept)} kept as they were (they differ from the store)" if self.kept else ""
        refused = f"{len(self.refused)} refused"
        return f"exported {self.written} memories of {store_id} to {directory}; {refused}{kept}"


def check_target(directory: Path, existing: Existing) -> None:
    """Refuse a folder that holds anything, unless ``--merge`` or ``--force`` says what to do with it."""
    if existing != "refuse" or not directory.exists() or root_is_empty(directory):
        return
    raise CliError(
        f"DIRECTORY {str(directory)!r} is not empty: nothing was written. Pass --merge to write only the "
        "files that are missing (and list those that differ), or --force to write every memory over the file "
        "at its path",
        ExitCode.USAGE,
    )


def _resume(existing: Existing) -> str:
    flag = "" if existing != "refuse" else " with --merge"
    return f"run the same command again{flag} to resume"


@click.command()
@click.argument("store_id", type=ID)
@click.argument("directory", type=NonEmptyPath(file_okay=False, path_type=Path))
@click.option(
    "--merge",
    "existing",
    flag_value="merge",
    help="Into a folder that holds files: write only the files that are missing; a file there with other "
    "content is left as it is and listed (exit 7).",
)
@click.option(
    "--force",
    "existing",
    flag_value="force",
    help="Into a folder that holds files: write every memory over the file at its path.",
)
@give_up_option
@progress_option
@admin_options
def export(
    *,
    store_id: str,
    directory: Path,
    existing: Existing | None,
    give_up_after: float,
    progress: bool | None,
    url: str,
    admin_key_file: Path | None,
) -> None:
    """Write every memory of a store as a file below DIRECTORY (created if missing; a folder that holds
    files needs --merge or --force)."""
    mode: Existing = existing or "refuse"
    check_target(directory, mode)
    directory.mkdir(parents=True, exist_ok=True)
    root_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    result = ExportResult()
    shown = sys.stderr.isatty() if progress is None else progress
    patience = Patience(give_up_after)

    async def work(client: StoreClient) -> None:
        total = 0
        if shown:  # one cheap pass of ids and sizes (100 a page) sizes the bar; content comes 20 a page
            async for _ in each_memory(client, patience, store_id, view="basic", limit=100):
                total += 1
        with progress_of("exporting", total, shown) as step:
            async for item in each_memory(client, patience, store_id, view="full", limit=20):
                _write(root_fd, item, mode, result)
                step()

    try:
        with quiet_transport_retries():
            run_with_client(url, admin_key_file, work, interruptible="the export")
    except pid1.Signalled as exc:
        raise interrupted(exc.signal, f"{result.summary(store_id, directory)}; {_resume(mode)}") from None
    except GaveUp as gave_up:
        raise stopped(gave_up, result.summary(store_id, directory), _resume(mode)) from None
    finally:
        os.close(root_fd)
    for path, why in result.refused:
        click.echo(f"refused {path!r}: {why}", err=True)
    for path in result.kept:
        click.echo(f"kept {path!r}: the file there differs from the store (--force writes over it)", err=True)
    click.echo(result.summary(store_id, directory), err=True)
    if result.refused or result.kept:
        sys.exit(ExitCode.PARTIAL)


def _write(root_fd: int, item: Memory, mode: Existing, result: ExportResult) -> None:
    try:
        segments = export_segments(item.path)
        if write_below(root_fd, segments, (item.content or "").encode("utf-8"), mode):
            result.written += 1
        else:
            result.kept.append(item.path)
    except (UnsafePathError, OSError) as exc:
        result.refused.append((item.path, str(exc)))
