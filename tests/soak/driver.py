"""The soak run: from one seed, a stream of operations on two sessions' folders, the store and the processes.

Three stores: ``shared`` is attached to both sessions, ``one`` to the first only, ``two`` to the second only.
Each operation is drawn from ``random.Random(seed)``: a local create, edit, delete or rename in one session's
folder, a file made unreadable (or readable again), a file swapped for a directory or back, a remote edit,
create or delete by another client (the admin key, straight to the server, with preconditions), a sidecar
SIGKILL and restart, or a store server restart. The sidecars reach the store only through the fault proxy.
Operations go in batches with a pause between them, so the sidecars' passes (every 5 s) interleave with them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memsync.api.hashing import content_sha256
from memsync.api.models import Memory, MemoryStoreResource
from memsync.client import StoreClient
from memsync.client import errors as store_errors
from support.sync_harness import store_contents

from . import checks
from .harness import FaultPlan, Pod, ProxyThread, make_pod

if TYPE_CHECKING:
    from conftest import RunningStoreServer

T = TypeVar("T")

ALL_KINDS = (
    "create",
    "edit",
    "delete",
    "rename",
    "unreadable",
    "swap",
    "remote_edit",
    "remote_create",
    "remote_delete",
    "kill_sidecar",
    "restart_server",
)
WEIGHTS = {
    "create": 20.0,
    "edit": 30.0,
    "delete": 7.0,
    "rename": 7.0,
    "unreadable": 2.0,
    "swap": 2.0,
    "remote_edit": 6.0,
    "remote_create": 3.0,
    "remote_delete": 2.0,
    "kill_sidecar": 0.06,
    "restart_server": 0.03,
}
DIRS = ("", "d0/", "d1/", "d1/e/", "d2/")
NAMES = tuple(f"f{i:02d}.md" for i in range(40))
BATCH = 40
PAUSE_S = 0.5
INITIAL_MEMORIES = 30
SERVER_START_S = 180.0  # a restarted store server may take long to answer on a loaded machine


@dataclass(frozen=True)
class Outcome:
    violations: list[checks.Violation]
    figures: dict[str, Any]


class Soak:
    def __init__(
        self,
        *,
        seed: int,
        ops: int,
        kinds: tuple[str, ...],
        base: Path,
        server: RunningStoreServer,
        final_outage_s: float = 0.0,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        unknown = sorted(set(kinds) - set(ALL_KINDS))
        if unknown:
            raise ValueError(f"unknown soak operation kinds {unknown}; known: {', '.join(ALL_KINDS)}")
        self.seed, self.ops, self.kinds, self.base, self.server = seed, ops, kinds, base, server
        self.rng = random.Random(seed)
        self.final_outage_s = final_outage_s
        self.weights = {**WEIGHTS, **(weights or {})}
        self.loop = asyncio.new_event_loop()
        self.admin = StoreClient(server.url, api_key=server.admin_key, max_retries=1, timeout=10)
        self.proxy: ProxyThread | None = None
        self.pods: list[Pod] = []
        self.attached: dict[str, list[str]] = {}
        self.last_local: dict[tuple[str, str, str], checks.LocalOp] = {}
        self.done: Counter[str] = Counter()
        self.missed: Counter[str] = Counter()
        self.wire_violations: list[str] = []
        self.sent: dict[str, set[str]] = {}
        self.current = ""  # the kind of the operation running now
        self.files: dict[tuple[int, str], list[str]] = {}
        self.remote: dict[str, list[Memory]] = {}
        self.unreadable_since: dict[tuple[str, str, str], float] = {}
        # what an unreadable file held when the test made it so (the agent can neither read nor replace it)
        self.blind_sha: dict[tuple[str, str, str], str] = {}
        self.kills: dict[str, list[float]] = {}  # pod -> when its sidecar was SIGKILLed

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    # --- setup and teardown ---------------------------------------------------------------------------------

    def _observe(self, method: str, target: str, body: bytes) -> None:
        problem = checks.audit_write(method, target, body)
        if problem is not None:
            self.wire_violations.append(problem)
        sent = checks.sent_precondition(method, target, body)
        if sent is not None and sent[1] is not None:
            self.sent.setdefault(sent[0], set()).add(sent[1])

    def setup(self) -> None:
        names = ("shared", "one", "two")
        ids = {}
        for name in names:
            store = self._run(self.admin.create_store(f"soak {name}"))
            ids[name] = store.id
            for i in range(INITIAL_MEMORIES):
                rel = f"{self.rng.choice(DIRS)}seed{i:02d}.md"
                self._run(self.admin.create_memory(store.id, "/" + rel, f"initial {name} {rel}\n"))
        self.proxy = ProxyThread(self.server.url, FaultPlan(rate=0.10, seed=self.seed), self._observe)
        proxy_url = self.proxy.start()
        layout = {"p1": ("shared", "one"), "p2": ("shared", "two")}
        for pod_name, attached in layout.items():
            resources = [MemoryStoreResource(memory_store_id=ids[n], access="read_write") for n in attached]
            session, secret = self._run(self.admin.mint_session(resources))
            stores = {ids[n]: f"/mnt/memory/{n}" for n in attached}
            pod = make_pod(
                pod_name, self.base, session_id=session.id, secret=secret, proxy_url=proxy_url, stores=stores
            )
            for sid in stores:
                self.attached.setdefault(sid, []).append(pod_name)
            self.pods.append(pod)
        for pod in self.pods:
            pod.mount()
            pod.start()
        for pod in self.pods:
            pod.wait_started()

    def close(self) -> None:
        for pod in self.pods:
            if pod.proc is not None and pod.proc.poll() is None:
                pod.kill()
        if self.proxy is not None:
            self.proxy.stop()
        self._run(self.admin.aclose())
        self.loop.close()

    # --- the operations -------------------------------------------------------------------------------------

    def _refresh(self) -> None:
        for i, pod in enumerate(self.pods):
            for sid in pod.stores:
                self.files[(i, sid)] = sorted(pod.local_files(sid))
        for sid in self.attached:
            try:
                self.remote[sid] = [m for m in self._run(self._listing(sid)) if isinstance(m, Memory)]
            except store_errors.StoreError:
                self.remote[sid] = []

    async def _listing(self, store_id: str) -> list[Any]:
        return [m async for m in self.admin.list_memories(store_id, limit=100)]

    def _record(
        self,
        pod: Pod,
        sid: str,
        rel: str,
        kind: str,
        content: str | None,
        op: int,
        *,
        fresh: bool = False,
        found: str | None = None,
    ) -> None:
        """A write (``content`` written; ``fresh``: where no file was; ``found``: what the file held just
        before, when read) or a delete (``content``: what the file held, None when unknown)."""
        key = (pod.name, sid, rel)
        sha = content_sha256(content) if content is not None else None
        blind = self.unreadable_since.pop(key, None)  # written or gone: readable, or nothing
        blind_sha = self.blind_sha.pop(key, None)
        before = self.last_local.get(key)
        now = time.time()
        written = before.at if kind == "delete" and before is not None and before.kind == "write" else None
        # Created where nothing was, by this write or an earlier one of the test, and never overwritten by the
        # agent since: the file still held what the test last wrote when it was written or deleted.
        if kind == "delete" and sha is None:
            sha = blind_sha  # unreadable since the test made it so: it still held that
        held = sha if kind == "delete" else content_sha256(found) if found is not None else None
        ours = before is not None and before.kind == "write" and held is not None and held == before.sha256
        created = now if fresh else before.created_at if before is not None and ours else None
        self.last_local[key] = checks.LocalOp(
            kind, sha, now, op, self.current, blind if kind == "delete" else None, written, created
        )

    def _held(self, pod: Pod, sid: str, rel: str) -> str | None:
        """What a file about to be deleted holds (None when it cannot be read)."""
        try:
            return (pod.folder(sid) / rel).read_text() if self._readable(pod, sid, rel) else None
        except (OSError, UnicodeDecodeError):
            return None

    def _write(self, pod: Pod, sid: str, rel: str, op: int) -> None:
        content = f"{pod.name} {rel} op{op} {self.rng.getrandbits(32):08x}\n"
        target = pod.folder(sid) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fresh = not os.path.lexists(target)
        try:
            found = None if fresh else target.read_text()
        except (OSError, UnicodeDecodeError):
            found = None
        with target.open("w") as fh:  # in place, as an editor or agent writes
            fh.write(content)
        self._record(pod, sid, rel, "write", content, op, fresh=fresh, found=found)

    def _pick_folder(self) -> tuple[int, Pod, str]:
        i = self.rng.randrange(len(self.pods))
        pod = self.pods[i]
        return i, pod, self.rng.choice(sorted(pod.stores))

    def _readable(self, pod: Pod, sid: str, rel: str) -> bool:
        try:
            return bool(os.stat(pod.folder(sid) / rel).st_mode & 0o444)
        except OSError:
            return False

    def _local_op(self, kind: str, op: int) -> bool:
        i, pod, sid = self._pick_folder()
        existing = self.files.get((i, sid), [])
        try:
            if kind == "create":
                return self._create(pod, sid, existing, op)
            if not existing:
                return False
            return self._change(kind, pod, sid, self.rng.choice(existing), op)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, FileExistsError):
            return False  # the sidecar (or an earlier op of this batch) changed the folder since the listing

    def _create(self, pod: Pod, sid: str, existing: list[str], op: int) -> bool:
        rel = self.rng.choice(DIRS) + self.rng.choice(NAMES)
        if (pod.folder(sid) / rel).exists() or any(
            rel.startswith(e + "/") or e.startswith(rel + "/") for e in existing
        ):
            return False
        self._write(pod, sid, rel, op)
        return True

    def _change(self, kind: str, pod: Pod, sid: str, rel: str, op: int) -> bool:
        root = pod.folder(sid)
        path = root / rel
        if kind == "edit":
            if not path.is_file() or not self._readable(pod, sid, rel):
                return False
            self._write(pod, sid, rel, op)
        elif kind == "delete":
            held = self._held(pod, sid, rel)
            path.unlink()
            self._record(pod, sid, rel, "delete", held, op)
        elif kind == "rename":
            new = self.rng.choice(DIRS) + self.rng.choice(NAMES)
            if new == rel or (root / new).exists() or not self._readable(pod, sid, rel):
                return False
            content = path.read_text()
            (root / new).parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, root / new)
            self._record(pod, sid, rel, "delete", content, op)
            self._record(pod, sid, new, "write", content, op, fresh=True)
        elif kind == "unreadable":
            if not path.is_file():  # swapped for a folder since the listing: the soak makes files unreadable
                return False
            readable = self._readable(pod, sid, rel)
            key = (pod.name, sid, rel)
            if readable:
                self.blind_sha[key] = content_sha256(path.read_text())
            os.chmod(path, 0o000 if readable else 0o644)
            if readable:
                self.unreadable_since[key] = time.time()
            if not readable:  # readable again: the content on disk is what must now reach the store
                content = path.read_text()
                before = self.last_local.get(key)
                if before is not None and before.kind == "write" and before.sha256 == content_sha256(content):
                    self.unreadable_since.pop(key, None)  # unchanged: the same edit as before
                    self.blind_sha.pop(key, None)
                else:
                    self._record(pod, sid, rel, "write", content, op)
        else:
            return self._swap(pod, sid, rel, op)
        return True

    def _swap(self, pod: Pod, sid: str, rel: str, op: int) -> bool:
        """A file becomes a directory holding one file; or a directory with files becomes one file."""
        root = pod.folder(sid)
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        if parent and self.rng.random() < 0.5:
            self._remove_tree(pod, sid, parent, op)
            self._write(pod, sid, parent, op)
            return True
        held = self._held(pod, sid, rel)
        (root / rel).unlink()
        self._record(pod, sid, rel, "delete", held, op)
        self._write(pod, sid, f"{rel}/inner.md", op)
        return True

    def _remove_tree(self, pod: Pod, sid: str, folder: str, op: int) -> None:
        """Every file below ``folder`` goes, including ones created since the batch's listing and ones the
        sidecar writes there while the tree is being removed (then the removal is simply repeated)."""
        root = pod.folder(sid)
        recorded: set[str] = set()
        for _ in range(20):
            for dirpath, _, names in os.walk(root / folder):
                for name in names:
                    below = (Path(dirpath) / name).relative_to(root).as_posix()
                    if below not in recorded:
                        recorded.add(below)
                        self._record(pod, sid, below, "delete", self._held(pod, sid, below), op)
            try:
                shutil.rmtree(root / folder)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.ENOENT):
                    raise
                if (root / folder).is_dir():
                    continue
            return
        raise AssertionError(f"{pod.name} {sid} {folder}: still not empty after 20 removals")

    def _remote_op(self, kind: str, op: int) -> bool:
        sid = self.rng.choice(sorted(self.attached))
        memories = self.remote.get(sid, [])
        try:
            if kind == "remote_create":
                rel = self.rng.choice(DIRS) + self.rng.choice(NAMES)
                self._run(self.admin.create_memory(sid, "/" + rel, f"admin {rel} op{op}\n"))
            elif not memories:
                return False
            else:
                memory = self.rng.choice(memories)
                if kind == "remote_edit":
                    content = f"admin {memory.path} op{op}\n"
                    self._run(
                        self.admin.update_memory(
                            sid, memory.id, content=content, expected_sha256=memory.content_sha256
                        )
                    )
                else:
                    self._run(self.admin.delete_memory(sid, memory.id, expected_sha256=memory.content_sha256))
                    memories.remove(memory)
        except store_errors.StoreError:
            return False  # changed meanwhile (409/404), or the server is restarting
        return True

    def _process_op(self, kind: str) -> bool:
        if kind == "kill_sidecar":
            pod = self.rng.choice(self.pods)
            self.kills.setdefault(pod.name, []).append(time.time())
            pod.kill()
            pod.start()
            pod.wait_started()
        else:
            if self.rng.random() < 0.5:
                self.server.kill()
            else:
                self.server.stop()
            self.server.start(timeout_s=SERVER_START_S)
        return True

    # --- the run --------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        started = time.monotonic()
        kinds = list(self.kinds)
        weights = [self.weights[k] for k in kinds]
        for op in range(self.ops):
            if op % BATCH == 0:
                if op:
                    time.sleep(PAUSE_S)
                self._refresh()
            kind = self.current = self.rng.choices(kinds, weights)[0]
            if kind.startswith("remote_"):
                ok = self._remote_op(kind, op)
            elif kind in ("kill_sidecar", "restart_server"):
                ok = self._process_op(kind)
            else:
                ok = self._local_op(kind, op)
            (self.done if ok else self.missed)[kind] += 1
        return self._finish(started)

    def _restore_some_readable(self) -> dict[checks.Folder, set[str]]:
        """Before the sessions end, half the unreadable files (seeded) become readable again, so their edits
        must then land; the rest stay unreadable and must be reported by path. Returns those left."""
        left: dict[checks.Folder, set[str]] = {}
        for pod in self.pods:
            for sid in sorted(pod.stores):
                for rel, content in sorted(pod.local_files(sid).items()):
                    if content is not None:
                        continue
                    if self.rng.random() < 0.5:
                        left.setdefault((pod.name, sid), set()).add(rel)
                        continue
                    path = pod.folder(sid) / rel
                    os.chmod(path, 0o644)
                    self.current = "readable_at_end"
                    self._record(pod, sid, rel, "write", path.read_text(), self.ops)
        return left

    def _finish(self, started: float) -> Outcome:
        unreadable = self._restore_some_readable()
        time.sleep(1.0)
        if self.final_outage_s:  # the store is unreachable as the final flushes start, for exactly that long
            assert self.proxy is not None
            self.proxy.proxy.outage(self.final_outage_s)
        for pod in self.pods:  # both sessions end at once
            pod.signal_end()
        exits = {pod.name: pod.wait_end() for pod in self.pods}
        assert self.proxy is not None
        faults = dict(self.proxy.proxy.faults_injected)
        requests = self.proxy.proxy.request_count
        final_local = {(pod.name, sid): pod.local_files(sid) for pod in self.pods for sid in pod.stores}
        live: dict[str, dict[str, str]] = {}
        versions: dict[str, list[checks.Version]] = {}
        for sid in self.attached:
            live[sid] = self._run(store_contents(self.admin, sid))
            versions[sid] = self._run(version_history(self.admin, sid))
        reports = {pod.name: warnings_of(pod) for pod in self.pods}
        sessions = {pod.name: pod.session_id for pod in self.pods}
        terminations = {pod.name: pod.termination() for pod in self.pods}
        held = {
            (pod, sid): (int(s.get("held_deletes", 0)), list(s.get("held_delete_paths", [])))
            for pod, term in terminations.items()
            for sid, s in term.get("stores", {}).items()
        }
        refused: dict[str, set[str]] = {}
        for term in terminations.values():
            for sid, s in term.get("stores", {}).items():
                refused.setdefault(sid, set()).update(s.get("refused_paths", []))
        excused = checks.held_at_end(
            self.last_local, live, versions, reports, sessions, held, final_local, self.kills
        )
        violations = [
            *checks.check_local_ops(
                self.last_local, final_local, live, versions, reports, sessions, held, self.kills
            ),
            *checks.check_store_shape(live, final_local, self.attached, excused, self.last_local, refused),
            *checks.check_terminations(
                exits, terminations, unreadable, checks.waiting_behind(excused, final_local)
            ),
            *checks.check_overwrites(versions, self.sent, sessions),
            *(checks.Violation("no_precondition", w) for w in self.wire_violations),
        ]
        if violations:  # the verdict's whole input beside the agents' logs, to replay it offline
            dump = {
                "last_local": {" ".join(k): dataclasses.asdict(v) for k, v in self.last_local.items()},
                "final_local": {" ".join(k): v for k, v in final_local.items()},
                "live": live,
                "versions": {k: [dataclasses.asdict(v) for v in vs] for k, vs in versions.items()},
                "reports": {k: [dataclasses.asdict(r) for r in rs] for k, rs in reports.items()},
                "sessions": sessions,
                "held": {" ".join(k): v for k, v in held.items()},
                "terminations": terminations,
                "unreadable": {" ".join(k): sorted(v) for k, v in unreadable.items()},
                "kills": self.kills,
            }
            (self.base / "verdict-inputs.json").write_text(json.dumps(dump, indent=1, default=str))
        figures = {
            "seed": self.seed,
            "ops": self.ops,
            "kinds": ",".join(self.kinds),
            "done": dict(self.done),
            "missed": dict(self.missed),
            "requests": requests,
            "faults": faults,
            "conflicts": checks.conflict_count(reports),
            "unreadable_at_end": sum(len(v) for v in unreadable.values()),
            "held_deletes_at_end": sum(len(v) for v in excused.values()),
            "final_outage_s": self.final_outage_s,
            "duration_s": round(time.monotonic() - started, 1),
            "violations": len(violations),
        }
        return Outcome(violations, figures)


async def version_history(admin: StoreClient, store_id: str) -> list[checks.Version]:
    """A store's whole version history, oldest first."""
    found = []
    async for v in admin.list_versions(store_id, limit=100):
        actor = v.created_by
        who = getattr(actor, "session_id", None) or getattr(actor, "api_key_id", None) or ""
        path = (v.path or "").lstrip("/")
        found.append(
            checks.Version(path, v.content_sha256, v.created_at.timestamp(), who, v.memory_id, v.operation)
        )
    return found[::-1]


def warnings_of(pod: Pod) -> list[checks.Report]:
    """Every WARNING the pod's agents logged about one path of one store."""
    out = []
    for r in pod.log_records():
        if r.get("level") == "WARNING" and r.get("path") and r.get("memory_store_id") and r.get("time"):
            at = datetime.fromisoformat(str(r["time"]).replace("Z", "+00:00")).timestamp()
            out.append(checks.Report(r["memory_store_id"], str(r["path"]).lstrip("/"), r["message"], at))
    return out
