"""Live sync health in the SessionMemory status: the ``Synced`` condition, ``lastSyncTime`` and the running
totals, from the sidecar's ``/status`` document and the final report (pure functions, no cluster)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from smem_harness import MOUNTED, pod_status, running, terminated

from memsync.contracts.health import StoreHealth, SyncHealth, decode_health, encode_health
from memsync.contracts.report import FlushReport, StoreCounts, parse_report, render_report
from memsync.controller import conditions
from memsync.controller.sessionmemory import derive as sm_derive
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.health import health_url
from memsync.controller.sessionmemory.pod import build_sandbox_pod
from memsync.crd.models import sandbox_template, validate_spec
from memsync.crd.schema import printer_columns
from support.crd_status import SessionMemoryStatus

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
STORES = {"memstore_01aa": "/mnt/memory/user-preferences", "memstore_02bb": "/mnt/memory/team-notes"}
MOUNT_OK = terminated("memsync-mount", 0, MOUNTED, finished="2026-01-01T12:01:00Z")


def running_status() -> dict[str, Any]:
    pod = {
        "metadata": {"name": "s1-sandbox"},
        "status": pod_status(
            "Running", [MOUNT_OK, running("memsync-sync", ready=True)], [running("sandbox", ready=True)]
        ),
    }
    return sm_derive.derive_status(None, pod, stores=STORES, generation=1, now=T0)


def healthy(last: str = "2026-01-01T12:05:00Z", **totals: Any) -> StoreHealth:
    return StoreHealth(healthy=True, outcome="synced", last_success=last, totals=StoreCounts(**totals))


def failing(error: str, passes: int = 2) -> StoreHealth:
    return StoreHealth(
        healthy=False,
        outcome="failed",
        last_success="2026-01-01T12:05:00Z",
        last_error=error,
        failing_passes=passes,
        totals=StoreCounts(uploaded=3, conflicts=1),
    )


def synced(status: dict[str, Any]) -> dict[str, Any]:
    cond = conditions.condition(status, ph.SYNCED)
    assert cond is not None
    return cond


def test_synced_true_with_last_sync_time_and_running_totals() -> None:
    before = running_status()
    assert before["lastSyncTime"] == "2026-01-01T12:01:00Z"  # the mount
    health = SyncHealth(
        healthy=True,
        stores={
            "memstore_01aa": healthy("2026-01-01T12:05:00Z", uploaded=4, downloaded=12, conflicts=1),
            "memstore_02bb": healthy("2026-01-01T12:04:30Z", refused=1, refused_paths=["bad\\name.md"]),
        },
    )
    status = sm_derive.health_status(before, health, generation=1, now=T0 + timedelta(minutes=5))
    assert status is not None
    assert synced(status)["status"] == "True" and synced(status)["reason"] == ph.IN_SYNC
    assert status["lastSyncTime"] == "2026-01-01T12:04:30Z"  # the oldest store's last clean sync
    first, second = status["stores"]
    assert (first["uploaded"], first["downloaded"], first["conflicts"]) == (4, 12, 1)
    assert second["refused"] == 1 and second["refusedPaths"] == ["bad\\name.md"]
    assert first["memoriesMounted"] == 12  # what the mount reported stays
    SessionMemoryStatus.model_validate(status)  # the CRD's status model accepts it


def test_synced_turns_false_naming_the_store_and_its_last_error_and_true_on_recovery() -> None:
    start = sm_derive.health_status(
        running_status(),
        SyncHealth(True, {"memstore_01aa": healthy(), "memstore_02bb": healthy()}),
        generation=1,
        now=T0,
    )
    assert start is not None
    error = "memory sync failed: TransportError: no response connection_error: connection refused"
    down = sm_derive.health_status(
        start,
        SyncHealth(False, {"memstore_01aa": failing(error), "memstore_02bb": healthy()}),
        generation=1,
        now=T0 + timedelta(seconds=30),
    )
    assert down is not None
    cond = synced(down)
    assert cond["status"] == "False" and cond["reason"] == ph.SYNC_FAILING
    assert cond["message"] == f"memstore_01aa: 2 failed passes, last error: {error}"
    assert cond["lastTransitionTime"] == "2026-01-01T12:00:30Z"
    assert down["lastSyncTime"] == start["lastSyncTime"]  # not a successful sync
    assert down["stores"][0]["uploaded"] == 3  # totals stay while failing
    # The same failure again writes nothing new (the status is patched only on change).
    again = sm_derive.health_status(
        down,
        SyncHealth(False, {"memstore_01aa": failing(error), "memstore_02bb": healthy()}),
        generation=1,
        now=T0 + timedelta(seconds=45),
    )
    assert again == down
    back = sm_derive.health_status(
        down,
        SyncHealth(True, {"memstore_01aa": healthy("2026-01-01T12:06:00Z"), "memstore_02bb": healthy()}),
        generation=1,
        now=T0 + timedelta(minutes=1),
    )
    assert back is not None and synced(back)["status"] == "True"
    assert back["lastSyncTime"] == "2026-01-01T12:05:00Z"


def test_unreadable_status_is_unknown_and_keeps_everything_else() -> None:
    before = running_status()
    status = sm_derive.health_status(
        before, None, error="ConnectError from http://10.0.0.7:9477/status", generation=1, now=T0
    )
    assert status is not None
    assert synced(status)["status"] == "Unknown" and synced(status)["reason"] == ph.STATUS_UNAVAILABLE
    assert status["stores"] == before["stores"] and status["lastSyncTime"] == before["lastSyncTime"]


def test_no_health_write_after_the_session_ended() -> None:
    ended = {"phase": "Succeeded", "podName": "s1-sandbox"}
    assert sm_derive.health_status(ended, SyncHealth(True), generation=1, now=T0) is None


def test_last_sync_time_never_moves_back_when_the_pod_is_seen_again() -> None:
    status = sm_derive.health_status(
        running_status(),
        SyncHealth(True, {"memstore_01aa": healthy("2026-01-01T12:09:00Z")}),
        generation=1,
        now=T0,
    )
    assert status is not None
    pod = {
        "metadata": {"name": "s1-sandbox"},
        "status": pod_status(
            "Running", [MOUNT_OK, running("memsync-sync", ready=True)], [running("sandbox", ready=True)]
        ),
    }
    again = sm_derive.derive_status(status, pod, stores=STORES, generation=1, now=T0)
    assert again["lastSyncTime"] == "2026-01-01T12:09:00Z"
    assert synced(again)["status"] == "True"  # the Pod watcher keeps the Synced condition


def test_final_report_gives_session_totals_held_deletes_and_the_final_synced_condition() -> None:
    report = FlushReport(
        complete=True,
        stores={
            "memstore_01aa": StoreCounts(
                uploaded=1, deleted=8, held_deletes=4, held_delete_paths=["f08.md", "f09.md"], unreadable=0
            ),
            "memstore_02bb": StoreCounts(),
        },
        totals={"memstore_01aa": StoreCounts(uploaded=40, deleted=9, conflicts=2, downloaded=12)},
    )
    text = render_report(report)
    assert parse_report(text) == report
    sync = terminated("memsync-sync", 0, text, finished="2026-01-01T12:30:00Z")
    pod = {
        "metadata": {"name": "s1-sandbox"},
        "status": pod_status("Succeeded", [MOUNT_OK, sync], [terminated("sandbox", 0)]),
    }
    status = sm_derive.derive_status(running_status(), pod, stores=STORES, generation=1, now=T0)
    first = status["stores"][0]
    assert (first["uploaded"], first["deleted"], first["conflicts"], first["downloaded"]) == (40, 9, 2, 12)
    assert first["heldDeletes"] == 4 and first["heldDeletePaths"] == ["f08.md", "f09.md"]
    assert first["unsent"] == 0
    flushed = conditions.condition(status, ph.FLUSHED)
    assert flushed is not None and "4 local deletions held back by the delete cap" in flushed["message"]
    assert "/f08.md" in flushed["message"]
    assert synced(status)["status"] == "True" and synced(status)["reason"] == "FinalFlushComplete"
    SessionMemoryStatus.model_validate(status)


def test_a_report_over_the_size_limit_drops_path_samples_first() -> None:
    stores = {
        f"memstore_{i:02d}": StoreCounts(refused=9, refused_paths=[f"{'p' * 200}{j}.md" for j in range(5)])
        for i in range(8)
    }
    text = render_report(FlushReport(complete=False, stores=stores, totals=dict(stores)))
    assert len(text.encode()) <= 4000
    parsed = parse_report(text)
    assert isinstance(parsed, FlushReport) and parsed.stores["memstore_00"].refused == 9


def test_health_document_round_trip_and_junk() -> None:
    health = SyncHealth(True, {"memstore_01aa": healthy(uploaded=2)})
    assert decode_health(encode_health(health)) == health
    assert decode_health(b"<html>proxy error</html>") is None
    assert decode_health(json.dumps({"healthy": "maybe"})) is None


@pytest.mark.parametrize(
    ("ip", "url"),
    [("10.1.2.3", "http://10.1.2.3:9477/status"), ("fd00::7", "http://[fd00::7]:9477/status"), (None, None)],
)
def test_health_url_is_the_pod_ip_and_the_sidecar_metrics_port(ip: str | None, url: str | None) -> None:
    spec = validate_spec(
        {
            "sessionId": "sesn_1",
            "workItemSecretRef": {"name": "w", "key": "k"},
            "stores": [{"memoryStoreId": "memstore_01aa", "name": "a"}],
            "template": sandbox_template({"image": "busybox"}),
        }
    )
    pod = build_sandbox_pod(name="s1", namespace="agents", uid="u", spec=spec, agent_image="memsync:test")
    pod["status"] = {"podIP": ip} if ip else {}
    assert health_url(pod) == url


def test_printer_columns_show_synced_and_last_sync() -> None:
    columns = {c["name"]: c for c in printer_columns()}
    assert columns["Synced"]["jsonPath"] == '.status.conditions[?(@.type=="Synced")].status'
    assert columns["Last Sync"]["jsonPath"] == ".status.lastSyncTime"
