"""``memsync status`` formatting: summaries and renderings of SessionMemories whose statuses are made by the
controller's own status functions (so the view reads what the operator really writes)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from memsync.contracts.health import StoreHealth, SyncHealth
from memsync.contracts.report import StoreCounts
from memsync.controller.sessionmemory import derive as sm_derive
from memsync.controller.sessionmemory import phases as ph
from memsync.status import render, view

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
NOW = datetime(2026, 1, 1, 12, 10, 0, tzinfo=UTC)
PREFS, NOTES = "memstore_01aa", "memstore_02bb"
STORES = {PREFS: "/mnt/memory/user-preferences", NOTES: "/mnt/memory/team-notes"}
MOUNTED = json.dumps({"phase": "mounted", "stores": {PREFS: {"memories": 12}, NOTES: {"memories": 3}}})


def container(name: str, state: dict[str, Any], *, ready: bool = False, restarts: int = 0) -> dict[str, Any]:
    return {"name": name, "ready": ready, "restartCount": restarts, "state": state}


def terminated(name: str, code: int, message: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "finishedAt": "2026-01-01T12:01:00Z",
    }
    if message is not None:
        state["message"] = message
    return container(name, {"terminated": state})


def running(name: str, *, ready: bool = True) -> dict[str, Any]:
    return container(name, {"running": {"startedAt": "2026-01-01T12:00:30Z"}}, ready=ready)


def pod(phase: str, init: list[dict[str, Any]], main: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "s1-sandbox", **meta},
        "spec": {
            "nodeName": "node-a",
            "initContainers": [
                {"name": "memsync-mount"},
                {"name": "memsync-sync", "restartPolicy": "Always"},
            ],
            "containers": [{"name": "sandbox", "env": [{"name": "API_KEY", "value": "sk-do-not-print"}]}],
        },
        "status": {
            "phase": phase,
            "podIP": "10.0.0.7",
            "initContainerStatuses": init,
            "containerStatuses": main,
        },
    }


RUNNING_POD = pod(
    "Running", [terminated("memsync-mount", 0, MOUNTED), running("memsync-sync")], [running("sandbox")]
)


def smem(name: str, status: dict[str, Any] | None, namespace: str = "agents") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "agents.memsync.dev/v1alpha1",
        "kind": "SessionMemory",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-01-01T11:58:00Z"},
        "spec": {
            "sessionId": "sesn_01",
            "workItemSecretRef": {"name": "work", "key": "secret"},
            "stores": [
                {"memoryStoreId": sid, "name": path.rsplit("/", 1)[1]} for sid, path in STORES.items()
            ],
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


def live_status(health: SyncHealth | None, error: str | None = None) -> dict[str, Any]:
    base = sm_derive.derive_status(None, RUNNING_POD, stores=STORES, generation=1, now=T0)
    result = sm_derive.health_status(base, health, error=error, generation=1, now=T0)
    assert result is not None
    return result


def healthy(**totals: int) -> StoreHealth:
    return StoreHealth(outcome="synced", last_success="2026-01-01T12:05:00Z", totals=StoreCounts(**totals))


def failing(error: str) -> StoreHealth:
    return StoreHealth(
        healthy=False,
        outcome="failed",
        last_success="2026-01-01T12:04:00Z",
        last_error=error,
        failing_passes=3,
        totals=StoreCounts(uploaded=2, conflicts=1),
    )


def healths(summary: view.SessionSummary) -> dict[str, str]:
    return {s.store_id: s.health for s in summary.stores}


def test_a_running_session_names_the_failing_store_and_sums_conflicts() -> None:
    # The other store's last error mentions the healthy one: only the store the condition names fails.
    health = SyncHealth(
        healthy=False,
        stores={PREFS: healthy(uploaded=5, conflicts=2), NOTES: failing(f"409 while {PREFS}: busy")},
    )
    summary = view.summarize(smem("s1", live_status(health)))
    assert summary.phase == "Running" and summary.ready == "True" and summary.synced == "False"
    assert healths(summary) == {PREFS: view.IN_SYNC, NOTES: view.FAILING}
    assert summary.conflicts == 3
    assert summary.last_sync_time == "2026-01-01T12:04:00Z"
    assert [s.label for s in summary.stores] == ["user-preferences", "team-notes"]
    assert {s.store_id: s.memories_mounted for s in summary.stores} == {PREFS: 12, NOTES: 3}
    assert {s.store_id: s.counts.uploaded for s in summary.stores} == {PREFS: 5, NOTES: 2}


def test_live_store_health_follows_the_synced_condition() -> None:
    in_sync = SyncHealth(healthy=True, stores={PREFS: healthy(), NOTES: healthy()})
    assert set(healths(view.summarize(smem("s", live_status(in_sync)))).values()) == {view.IN_SYNC}
    first = SyncHealth(healthy=True, stores={PREFS: healthy(), NOTES: StoreHealth()})
    assert set(healths(view.summarize(smem("s", live_status(first)))).values()) == {view.PENDING}
    unreadable = live_status(None, error="connection refused")
    assert set(healths(view.summarize(smem("s", unreadable))).values()) == {view.UNKNOWN}
    before_any_health = sm_derive.derive_status(None, RUNNING_POD, stores=STORES, generation=1, now=T0)
    assert set(healths(view.summarize(smem("s", before_any_health))).values()) == {view.PENDING}


def test_ended_sessions_say_whether_the_final_flush_saved_everything() -> None:
    report = {
        "phase": "flushed",
        "complete": False,
        "stores": {
            PREFS: {"uploaded": 4, "deleted": 1, "conflicts": 0, "refused": 0, "unsent": 0},
            NOTES: {"uploaded": 0, "deleted": 0, "conflicts": 0, "refused": 0, "unsent": 2},
        },
    }
    ended = pod(
        "Succeeded",
        [terminated("memsync-mount", 0, MOUNTED), terminated("memsync-sync", 0, json.dumps(report))],
        [terminated("sandbox", 0)],
    )
    status = sm_derive.derive_status(None, ended, stores=STORES, generation=1, now=T0)
    summary = view.summarize(smem("s", status))
    assert summary.phase == "Failed"
    assert healths(summary) == {PREFS: view.UNCONFIRMED, NOTES: view.UNSAVED}

    report["complete"] = True
    report["stores"][NOTES]["unsent"] = 0  # type: ignore[index]
    ok = pod(
        "Succeeded",
        [terminated("memsync-mount", 0, MOUNTED), terminated("memsync-sync", 0, json.dumps(report))],
        [terminated("sandbox", 0)],
    )
    summary = view.summarize(
        smem("s", sm_derive.derive_status(None, ok, stores=STORES, generation=1, now=T0))
    )
    assert summary.phase == "Succeeded"
    assert set(healths(summary).values()) == {view.FLUSHED}

    report["stores"][NOTES]["refused"] = 2  # type: ignore[index]  # files the flush could not send
    with_refused = pod(
        "Succeeded",
        [terminated("memsync-mount", 0, MOUNTED), terminated("memsync-sync", 0, json.dumps(report))],
        [terminated("sandbox", 0)],
    )
    summary = view.summarize(
        smem("s", sm_derive.derive_status(None, with_refused, stores=STORES, generation=1, now=T0))
    )
    assert summary.phase == "Succeeded"
    assert healths(summary) == {PREFS: view.FLUSHED, NOTES: view.REFUSED}

    refused = sm_derive.refusal_status(
        None, reason=ph.SECRET_NOT_FOUND, message="no Secret work", stores=STORES, generation=1, now=T0
    )
    assert set(healths(view.summarize(smem("s", refused))).values()) == {view.NOT_MOUNTED}


def test_a_session_without_status_lists_its_spec_stores_as_pending() -> None:
    summary = view.summarize(smem("new", None))
    assert summary.phase == "Pending" and summary.pod_name is None and summary.last_sync_time is None
    assert healths(summary) == {PREFS: view.PENDING, NOTES: view.PENDING}


def test_junk_fields_never_break_a_summary() -> None:
    junk = {"metadata": "x", "spec": {"stores": [None, 3]}, "status": {"stores": ["x", {"conflicts": -1}]}}
    summary = view.summarize(junk)
    assert summary.name == "" and summary.conflicts == 0 and len(summary.stores) == 1


def test_the_list_is_a_kubectl_like_table() -> None:
    health = SyncHealth(healthy=False, stores={PREFS: healthy(conflicts=2), NOTES: failing("timeout")})
    rows = view.sort_summaries(
        [view.summarize(smem("s2", None, "zeta")), view.summarize(smem("s1", live_status(health), "alpha"))]
    )
    text = render.render_list(rows, now=NOW, all_namespaces=True)
    lines = text.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "PHASE", "STORES", "LAST", "SYNC", "CONFLICTS", "AGE"]
    assert lines[1].split() == [
        "alpha",
        "s1",
        "Running",
        "user-preferences:in-sync,team-notes:failing",
        "6m",
        "3",
        "12m",
    ]
    assert lines[2].split() == [
        "zeta",
        "s2",
        "Pending",
        "user-preferences:pending,team-notes:pending",
        "<none>",
        "0",
        "12m",
    ]
    # Columns line up: every header starts where its cells start.
    assert lines[1].index("Running") == lines[0].index("PHASE") == lines[2].index("Pending")
    assert "NAMESPACE" not in render.render_list(rows, now=NOW, all_namespaces=False)
    wide = render.render_list(rows, now=NOW, all_namespaces=False, wide=True).splitlines()
    assert wide[0].split()[-3:] == ["REFUSED", "SESSION", "POD"]
    assert wide[1].split()[-3] == "0" and wide[2].split()[-3:] == ["0", "sesn_01", "<none>"]  # no Pod yet


def test_the_detail_shows_stores_conditions_pod_and_recent_events_but_no_secret() -> None:
    health = SyncHealth(healthy=False, stores={PREFS: healthy(uploaded=5), NOTES: failing("503 overloaded")})
    obj = smem("s1", live_status(health))
    obj["status"]["stores"][1]["refusedPaths"] = ["big.bin"]
    events = [
        {
            "involvedObject": {"kind": "SessionMemory", "name": "s1"},
            "type": "Normal",
            "reason": f"Event{i:02d}",
            "message": f"number {i}",
            "lastTimestamp": f"2026-01-01T12:00:{i * 2:02d}Z",
        }
        for i in range(12)
    ] + [
        {
            "involvedObject": {"kind": "Pod", "name": "s1-sandbox"},
            "type": "Warning",
            "reason": "BackOff",
            "message": "pulling",
            "count": 4,
            "eventTime": "2026-01-01T12:09:00.123456Z",
        },
        {"involvedObject": {"kind": "SessionMemory", "name": "other"}, "reason": "NotOurs", "message": "x"},
    ]
    detail = view.detail(obj, RUNNING_POD, events)
    assert [e.reason for e in detail.events] == [f"Event{i:02d}" for i in range(3, 12)] + ["BackOff"]
    assert {c.type for c in detail.conditions} == {"Ready", "StoresMounted", "Flushed", "Synced"}
    assert detail.pod is not None
    assert [(c.name, c.role, c.state, c.ready) for c in detail.pod.containers] == [
        ("memsync-mount", "init", "terminated", False),
        ("memsync-sync", "sidecar", "running", True),
        ("sandbox", "main", "running", True),
    ]
    text = render.render_detail(detail, now=NOW)
    assert "Session:   sesn_01" in text
    assert "Last sync: 2026-01-01T12:04:00Z (6m ago)" in text
    assert "Pod: s1-sandbox (Running, node node-a, IP 10.0.0.7)" in text
    assert "  team-notes: refused paths big.bin" in text
    synced = next(line for line in text.splitlines() if line.startswith("  Synced"))
    assert synced.split()[:3] == ["Synced", "False", "SyncFailing"] and "503 overloaded" in synced
    assert "pulling (x4)" in text
    assert "sk-do-not-print" not in text
    as_json = json.dumps(render.as_json(detail))
    assert "sk-do-not-print" not in as_json
    data = json.loads(as_json)
    assert data["summary"]["stores"][1]["health"] == "failing"
    assert data["summary"]["stores"][1]["counts"]["refusedPaths"] == ["big.bin"]
    assert data["pod"]["containers"][1]["role"] == "sidecar"


def test_a_detail_without_pod_or_events() -> None:
    text = render.render_detail(view.detail(smem("new", None), None, []), now=NOW)
    assert "Pod: <none>" in text and "Events:\n  <none>" in text and "Conditions:\n  <none>" in text
    gone = smem("s1", live_status(None, "x"))
    assert "Pod: s1-sandbox (not found)" in render.render_detail(view.detail(gone, None, []), now=NOW)


def test_ages_read_like_kubectl() -> None:
    def ago(seconds: int) -> str:
        return render.age(datetime.fromtimestamp(NOW.timestamp() - seconds, UTC).isoformat(), NOW)

    assert [ago(s) for s in (0, 59, 60, 119, 3599, 7199, 7200, 172799, 172800)] == [
        "0s",
        "59s",
        "1m",
        "1m",
        "59m",
        "119m",
        "2h",
        "47h",
        "2d",
    ]
    assert render.age(None, NOW) == "<unknown>" and render.age("yesterday", NOW) == "<unknown>"


def test_json_list_is_items() -> None:
    obj = smem("a", None)
    del obj["spec"]["stores"][0]["name"]
    data = render.as_json([view.summarize(obj)])
    assert list(data) == ["items"] and data["items"][0]["name"] == "a"
    assert data["items"][0]["stores"][1]["label"] == "team-notes"
    assert data["items"][0]["stores"][0] == {
        "storeId": PREFS,
        "label": PREFS,
        "mountPath": None,
        "health": "pending",
        "memoriesMounted": None,
        "counts": {
            "uploaded": 0,
            "deleted": 0,
            "conflicts": 0,
            "refused": 0,
            "unsent": 0,
            "downloaded": 0,
            "unreadable": 0,
            "heldDeletes": 0,
            "refusedPaths": [],
            "unreadablePaths": [],
            "heldDeletePaths": [],
        },
    }


def test_an_unschedulable_pod_is_shown_with_the_schedulers_verdict() -> None:
    """The Scheduled condition (the Pod's PodScheduled, mirrored by the operator) in ``memsync status``."""
    waiting_pod = {
        "metadata": {"name": "s1-sandbox"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient memory.",
                }
            ],
        },
    }
    status = sm_derive.derive_status(None, waiting_pod, stores=STORES, generation=1, now=T0)
    detail = view.detail(smem("s1", dict(status)), waiting_pod, [])
    text = render.render_detail(detail, now=NOW)
    line = next(line for line in text.splitlines() if line.startswith("  Scheduled"))
    assert line.split()[:3] == ["Scheduled", "False", "Unschedulable"] and "Insufficient memory" in line
    assert "waits for a node" in (detail.summary.message or "")
