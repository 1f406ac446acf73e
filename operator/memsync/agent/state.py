"""Per-store sync state (docs/sync-semantics.md#the-baseline), persisted in ``MEMSYNC_STATE_DIR`` so a
restarted sidecar resumes.

Kept only in memory, it would lose every unsynced edit when the process is killed; memsync writes it
atomically (temp file, fsync, rename) after the mount, before a batch of uploads (so ``sent_shas`` survives a
SIGKILL mid-upload) and after every store pass. A per-store lock file (``flock``) makes sure ``flush`` and
``sync`` never reconcile the same store at the same time.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memsync.agent.localfs import RootId
from memsync.contracts.report import StoreCounts

STATE_VERSION = 1


class StoreState(BaseModel):
    """What memsync remembers about one store between passes (and across restarts)."""

    model_config = ConfigDict(extra="ignore")

    version: int = STATE_VERSION
    memory_store_id: str
    mount_path: str = ""
    root_dev: int | None = None
    root_ino: int | None = None
    # the directory the store folder was mounted into: a recovery re-creates the folder only inside it
    parent_dev: int | None = None
    parent_ino: int | None = None
    # rel -> content sha256 as of the last download or successful sync (only successful writes/calls add)
    baseline: dict[str, str] = Field(default_factory=dict)
    # rel -> sha agreed with the store before a recovery cleared the baseline (a wiped folder). Never a reason
    # to delete anything; it only tells a file written since (the store unchanged) from a conflict, until the
    # path is back in the baseline.
    prior_baseline: dict[str, str] = Field(default_factory=dict)
    # rel -> memory id, from the last listing or write (lets a push-only flush update without listing)
    remote_ids: dict[str, str] = Field(default_factory=dict)
    # rel -> sha the server (or the local checks) refused for good; retried only once the file changes
    refused_shas: dict[str, str] = Field(default_factory=dict)
    # rel -> wall-clock time (epoch seconds) the file was first seen missing locally
    pending_deletes: dict[str, float] = Field(default_factory=dict)
    # rel -> sha of bytes sent whose outcome is unknown (settled by the next listing)
    sent_shas: dict[str, str] = Field(default_factory=dict)
    # remote path -> why it can never become a local file (from the last listing); counted as refused
    unmappable: dict[str, str] = Field(default_factory=dict)
    # the session's running totals (mount included); they survive sidecar restarts and the shutdown
    totals: StoreCounts = Field(default_factory=StoreCounts)
    mounted_at: float | None = None
    last_pass_at: float | None = None
    last_success_at: float | None = None

    @property
    def root_id(self) -> RootId | None:
        if self.root_dev is None or self.root_ino is None:
            return None
        return RootId(self.root_dev, self.root_ino)

    def set_root(self, root_id: RootId | None) -> None:
        self.root_dev = root_id.dev if root_id else None
        self.root_ino = root_id.ino if root_id else None

    @property
    def parent_id(self) -> RootId | None:
        if self.parent_dev is None or self.parent_ino is None:
            return None
        return RootId(self.parent_dev, self.parent_ino)

    def set_parent(self, parent_id: RootId | None) -> None:
        self.parent_dev = parent_id.dev if parent_id else None
        self.parent_ino = parent_id.ino if parent_id else None


def state_file(state_dir: Path, memory_store_id: str) -> Path:
    return state_dir / f"store-{memory_store_id}.json"


def lock_file(state_dir: Path, memory_store_id: str) -> Path:
    return state_dir / f"store-{memory_store_id}.lock"


class StateCorrupt(ValueError):
    """The state file exists but cannot be read back (never silently replaced: that would lose edits)."""


def load_state(state_dir: Path, memory_store_id: str) -> StoreState | None:
    """The saved state, or None when there is none yet."""
    path = state_file(state_dir, memory_store_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        state = StoreState.model_validate_json(data)
    except ValidationError as exc:
        raise StateCorrupt(f"state file {path} is not valid: {exc.error_count()} problem(s)") from None
    if state.memory_store_id != memory_store_id:
        raise StateCorrupt(f"state file {path} belongs to memory store {state.memory_store_id}")
    return state


def save_state(state_dir: Path, state: StoreState) -> None:
    data = json.dumps(state.model_dump(mode="json"), separators=(",", ":"), sort_keys=True).encode("utf-8")
    write_atomic(state_dir, state_file(state_dir, state.memory_store_id).name, data)


def write_atomic(state_dir: Path, name: str, data: bytes) -> None:
    """Write ``state_dir/name`` atomically: temp file in the same directory, fsync, rename, fsync the
    directory."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state_dir / name
    tmp = state_dir / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    dir_fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_state(state_dir: Path, memory_store_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        state_file(state_dir, memory_store_id).unlink()


class LockTimeout(TimeoutError):
    """Another memsync process held the store's lock for the whole budget."""


@contextlib.asynccontextmanager
async def store_lock(state_dir: Path, memory_store_id: str, *, wait_s: float | None) -> AsyncIterator[None]:
    """Hold the store's exclusive ``flock`` (polling without blocking the event loop).

    ``wait_s`` None waits forever. flock locks belong to the open file description, so two opens in one
    process exclude each other too (in-process tests behave like separate processes).
    """
    os.makedirs(state_dir, mode=0o700, exist_ok=True)  # noqa: PTH103 (no pathlib: ASYNC240)
    fd = os.open(lock_file(state_dir, memory_store_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = None if wait_s is None else time.monotonic() + wait_s
        delay = 0.01
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
            if deadline is not None and time.monotonic() >= deadline:
                raise LockTimeout(
                    f"memory store {memory_store_id} is being synced by another memsync process"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
