"""The sync agent's termination report: one line of JSON (< 4 KiB) that the kubelet hands to the operator.

``memsync mount`` writes ``{"phase":"mounted","stores":{id:{"memories":n}}}`` or
``{"phase":"mount_failed","store":id|null,"error":"..."}``; ``memsync sync`` (at shutdown) and
``memsync flush`` write ``{"phase":"flushed","complete":bool,"stores":{id:{...counts}},"totals":{...}}``.

``stores`` holds what that command did (its uploads, deletes, conflicts; the files it left unsent; the paths
refused, unreadable or held back by the delete cap when it ended); ``totals`` holds the session's running
totals per store, which survive sidecar restarts and the shutdown. The agent writes the report with
``render_report``; the operator reads it with ``parse_report``, which never fails: a missing, truncated or
malformed message is "not reported" (None), and a bad count reads as 0.
"""

from __future__ import annotations

import json
from dataclasses import asdict, field, fields
from typing import Annotated, Any, Final, get_type_hints

from pydantic import BeforeValidator, Field
from pydantic.dataclasses import dataclass
from pydantic.fields import FieldInfo

from memsync.api import json_text

REPORT_MAX_BYTES: Final = 4000  # the kubelet keeps at most 4 KiB of a termination message
MESSAGE_LIMIT: Final = 4096
SAMPLE_MAX: Final = 5  # paths named per kind of problem (refused, unreadable, held deletes)
NO_REASON: Final = "memsync mount failed without saying why"

MOUNTED: Final = "mounted"
MOUNT_FAILED: Final = "mount_failed"
FLUSHED: Final = "flushed"


def _count(value: Any) -> int:
    """A count as reported: a non-negative integer, anything else reads as 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def _paths(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [p for p in value if isinstance(p, str)][:SAMPLE_MAX]


Count = Annotated[int, BeforeValidator(_count)]
Paths = Annotated[list[str], BeforeValidator(_paths)]

#: The counts every flushed report carries for every store, even when 0.
BASE_COUNTS: Final = ("uploaded", "deleted", "conflicts", "refused", "unsent")
#: Counts only a flush report sets (the live status never does).
FINAL_ONLY: Final = ("unsent",)
#: Cumulative counts (summed into the session totals); the others describe the state at one moment.
CUMULATIVE: Final = ("uploaded", "deleted", "conflicts", "downloaded")


@dataclass
class StoreCounts:
    """What memsync did to one store: by one command (``stores``), or over the session (``totals``).

    ``refused``/``unreadable``/``held_deletes`` (and their path samples) describe the store's state when the
    counts were taken: files the server or the local checks refused (or store paths that cannot become a local
    file), local files that cannot be read, local deletions held back by the per-pass delete cap.
    """

    uploaded: Annotated[Count, Field(description="Files uploaded (created or updated).")] = 0
    deleted: Annotated[Count, Field(description="Local deletions pushed to the store.")] = 0
    conflicts: Annotated[Count, Field(description="Local edits that lost to a change in the store.")] = 0
    refused: Annotated[
        Count,
        Field(
            description="Paths not synced: refused by the store, or that cannot be a memory or a local file."
        ),
    ] = 0
    unsent: Annotated[Count, Field(description="Final flush: changed files left unsaved.")] = 0
    downloaded: Annotated[Count, Field(description="Memories written to the folder.")] = 0
    unreadable: Annotated[Count, Field(description="Local files or folders the sidecar cannot read.")] = 0
    held_deletes: Annotated[
        Count,
        Field(description="Local deletions held back by the per-sync delete cap (at the end: never sent)."),
    ] = 0
    refused_paths: Annotated[Paths, Field(description="A sample of the refused paths.")] = field(
        default_factory=list
    )
    unreadable_paths: Annotated[Paths, Field(description="A sample of the unreadable paths.")] = field(
        default_factory=list
    )
    held_delete_paths: Annotated[Paths, Field(description="A sample of the held deletions' paths.")] = field(
        default_factory=list
    )

    def to_json(self, *, samples: bool = True) -> dict[str, Any]:
        """The five base counts always; the others only when set (``samples``: with the path lists)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in BASE_COUNTS or (value and (samples or not isinstance(value, list))):
                out[f.name] = list(value) if isinstance(value, list) else value
        return out

    def add(self, other: StoreCounts) -> None:
        """Add ``other``'s cumulative counts to these."""
        for name in CUMULATIVE:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def copy(self) -> StoreCounts:
        return StoreCounts(**asdict(self))


def count_fields() -> list[tuple[str, str, bool]]:
    """(field name, description, is a path list) of every count, in order (the status schema uses them)."""
    hints = get_type_hints(StoreCounts, include_extras=True)
    out = []
    for f in fields(StoreCounts):
        meta = [m for m in hints[f.name].__metadata__ if isinstance(m, FieldInfo)]
        description = next((m.description for m in meta if m.description), "")
        out.append((f.name, description, f.name.endswith("_paths")))
    return out


def counts_from(value: Any) -> StoreCounts | None:
    """Lenient: a JSON object of counts (bad entries read as 0), None when it is not an object."""
    if not isinstance(value, dict):
        return None
    known = {f.name for f in fields(StoreCounts)}
    return StoreCounts(**{k: v for k, v in value.items() if k in known})


@dataclass(frozen=True)
class MountReport:
    """A successful ``memsync mount``: memories written per store."""

    memories: dict[str, int]


@dataclass(frozen=True)
class MountFailure:
    """A failed ``memsync mount``: the store it failed on (if one) and why."""

    store: str | None
    error: str


@dataclass(frozen=True)
class FlushReport:
    """The final shutdown (or a ``memsync flush``): complete only when no changed file was left unsent."""

    complete: bool
    stores: dict[str, StoreCounts] = field(default_factory=dict)
    totals: dict[str, StoreCounts] = field(default_factory=dict)


Report = MountReport | MountFailure | FlushReport


def report_payload(report: Report, *, samples: bool = True) -> dict[str, Any]:
    """The report as a JSON object (``samples``: with the path samples)."""
    if isinstance(report, MountReport):
        return {"phase": MOUNTED, "stores": {sid: {"memories": n} for sid, n in report.memories.items()}}
    if isinstance(report, MountFailure):
        return {"phase": MOUNT_FAILED, "store": report.store, "error": report.error}
    payload: dict[str, Any] = {
        "phase": FLUSHED,
        "complete": report.complete,
        "stores": {sid: c.to_json(samples=samples) for sid, c in report.stores.items()},
    }
    if report.totals:
        payload["totals"] = {sid: c.to_json(samples=False) for sid, c in report.totals.items()}
    return payload


def _line(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True)


def _escaped_start(text: str, room: int) -> str:
    """The longest start of ``text`` whose JSON string takes at most ``room`` bytes as ``_line`` writes it
    (every character outside ASCII is a 6- or 12-byte escape there)."""
    used = 0
    for i, ch in enumerate(text):
        used += len(json.dumps(ch)) - 2
        if used > room:
            return text[:i]
    return text


def render_report(report: Report) -> str:
    """One line of JSON under ``REPORT_MAX_BYTES``: path samples go first, then the error is shortened."""
    line = _line(report_payload(report))
    if len(line.encode("utf-8")) <= REPORT_MAX_BYTES:
        return line
    payload = report_payload(report, samples=False)
    line = _line(payload)
    if len(line.encode("utf-8")) > REPORT_MAX_BYTES and isinstance(report, MountFailure):
        # The line is ASCII (JSON escapes the rest): room is counted in the error's escaped form.
        room = REPORT_MAX_BYTES - (len(line) - (len(json.dumps(report.error)) - 2)) - len("...")
        payload["error"] = _escaped_start(report.error, room) + "..."
        line = _line(payload)
    if len(line.encode("utf-8")) > REPORT_MAX_BYTES and "totals" in payload:
        del payload["totals"]
        line = _line(payload)
    return line


def _json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in a termination message: the whole text, else its last line that is one.

    With ``terminationMessagePolicy: FallbackToLogsOnError`` the kubelet may hand over the tail of the log
    instead of the message; the agent's JSON line is then usually the last line that parses.
    """
    text = text.strip()
    if not text:
        return None
    for candidate in [text, *reversed([line.strip() for line in text.splitlines()])]:
        if not candidate.startswith("{"):
            continue
        try:
            value = json_text.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _store_counts(value: Any) -> dict[str, StoreCounts]:
    out: dict[str, StoreCounts] = {}
    if isinstance(value, dict):
        for sid, info in value.items():
            counts = counts_from(info)
            if isinstance(sid, str) and counts is not None:
                out[sid] = counts
    return out


def parse_report(text: Any) -> Report | None:
    """Parse one termination message of the sync agent; None when it is absent or not understood."""
    if not isinstance(text, str):
        return None
    payload = _json_object(text)
    if payload is None:
        return None
    phase = payload.get("phase")
    stores = payload.get("stores")
    if phase == MOUNTED:
        memories: dict[str, int] = {}
        for sid, info in (stores if isinstance(stores, dict) else {}).items():
            count = info.get("memories") if isinstance(info, dict) else None
            if isinstance(sid, str) and isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                memories[sid] = count
        return MountReport(memories=memories)
    if phase == MOUNT_FAILED:
        error = payload.get("error")
        store = payload.get("store")
        if not isinstance(error, str) or not error.strip():
            error = NO_REASON
        return MountFailure(store=store if isinstance(store, str) else None, error=error[:MESSAGE_LIMIT])
    if phase == FLUSHED:
        # "complete" must be literally true: never claim a flush that was not confirmed.
        return FlushReport(
            complete=payload.get("complete") is True,
            stores=_store_counts(stores),
            totals=_store_counts(payload.get("totals")),
        )
    return None
