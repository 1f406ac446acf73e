"""status.py: a SessionMemory's status from its Pod, as pure functions (no cluster, no clock)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from smem_harness import (
    FIRST_STORE_RESULT,
    MOUNTED,
    _prune,
    flushed,
    pod_status,
    running,
    terminated,
    waiting,
)

from memsync.agent.messages import ALREADY_EXISTS, CANNOT_CREATE, MAKE_WRITABLE
from memsync.api.secret import NO_SESSIONS_TOKEN
from memsync.contracts import report as rp
from memsync.controller import conditions
from memsync.controller.sessionmemory import derive as sm_derive
from memsync.controller.sessionmemory import outcome, podview
from memsync.controller.sessionmemory import phases as ph
from memsync.crd.models import PHASES
from memsync.crd.schema import build_crd
from support.crd_status import SessionMemoryStatus

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)
STORES = {"memstore_01aa": "/mnt/memory/user-preferences", "memstore_02bb": "/mnt/memory/team-notes"}


def mount_failed(error: str, store: str | None = "memstore_01aa") -> str:
    return json.dumps({"phase": "mount_failed", "store": store, "error": error})


def pod(
    status: dict[str, Any] | None = None, *, deleting: bool = False, name: str = "s1-sandbox"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "agents"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T12:04:00Z"
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {}}
    if status is not None:
        out["status"] = status
    return out


MOUNT_OK = terminated("memsync-mount", 0, MOUNTED, finished="2026-01-01T12:01:00Z")


def running_pod(*, sync_ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    return pod(
        pod_status(
            "Running", [MOUNT_OK, running("memsync-sync", ready=sync_ready)], [running("sandbox", ready=True)]
        ),
        deleting=deleting,
    )


def ended_pod(
    sandbox_code: int = 0,
    sync_message: str | None = None,
    *,
    phase: str = "Succeeded",
    deleting: bool = False,
    sync_code: int = 0,
) -> dict[str, Any]:
    sync = terminated("memsync-sync", sync_code, sync_message, finished="2026-01-01T12:30:00Z")
    return pod(pod_status(phase, [MOUNT_OK, sync], [terminated("sandbox", sandbox_code)]), deleting=deleting)


def derive(p: dict[str, Any], previous: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    kw.setdefault("stores", STORES)
    kw.setdefault("generation", 1)
    kw.setdefault("now", T0)
    return sm_derive.derive_status(previous, p, **kw)


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found = conditions.condition(status, type_)
    assert found is not None, f"no {type_} condition in {status}"
    return found


def summary(status: dict[str, Any]) -> tuple[str, str, str, str, str]:
    return (
        status["phase"],
        cond(status, "Ready")["reason"],
        cond(status, "StoresMounted")["status"],
        cond(status, "Flushed")["status"],
        cond(status, "Flushed")["reason"],
    )


# --------------------------------------------------------------------------------------------------
# Termination messages
# --------------------------------------------------------------------------------------------------


def test_parse_mount_report() -> None:
    assert outcome.parse_termination_message(MOUNTED) == rp.MountReport(
        {"memstore_01aa": 12, "memstore_02bb": 3}
    )


def test_parse_mount_report_ignores_malformed_entries() -> None:
    text = json.dumps(
        {
            "phase": "mounted",
            "stores": {
                "memstore_ok": {"memories": 0},
                "memstore_neg": {"memories": -1},
                "memstore_bool": {"memories": True},
                "memstore_str": {"memories": "12"},
                "memstore_list": [1],
                "memstore_missing": {},
            },
        }
    )
    assert outcome.parse_termination_message(text) == rp.MountReport({"memstore_ok": 0})
    assert outcome.parse_termination_message('{"phase":"mounted"}') == rp.MountReport({})
    assert outcome.parse_termination_message('{"phase":"mounted","stores":[1,2]}') == rp.MountReport({})


def disrupted(p: dict[str, Any], reason: str, message: str, status: str = "True") -> dict[str, Any]:
    p["status"]["conditions"] = [
        {"type": "Ready", "status": "False"},
        {"type": "DisruptionTarget", "status": status, "reason": reason, "message": message},
    ]
    return p


def test_a_disrupted_pod_is_interrupted_and_says_what_was_flushed() -> None:
    # Evicted through the API (drain, preemption): SIGTERM, a clean exit, a complete final flush.
    evicted = disrupted(
        ended_pod(0, flushed(), phase="Failed", deleting=True), "EvictionByEvictionAPI", "by API"
    )
    status = derive(evicted)
    assert summary(status) == ("Failed", "Interrupted", "True", "True", "FlushComplete")
    assert "interrupted (EvictionByEvictionAPI: by API)" in status["message"]
    assert "the final flush completed" in status["message"]
    # Evicted by the kubelet with no time to speak of: the final flush never reported.
    kubelet = disrupted(
        ended_pod(137, None, phase="Failed", sync_code=137), "TerminationByKubelet", "emptyDir over its limit"
    )
    kubelet["status"]["reason"] = "Evicted"
    status = derive(kubelet)
    assert summary(status) == ("Failed", "Interrupted", "True", "False", "FlushNotReported")
    assert "TerminationByKubelet: emptyDir over its limit" in status["message"]
    assert "did not report a final flush" in status["message"]
    # The kubelet's local-storage eviction (an emptyDir over its sizeLimit) sets the reason and no condition.
    full = ended_pod(137, None, phase="Failed", sync_code=137)
    full["status"]["reason"] = "Evicted"
    full["status"]["message"] = 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '
    status = derive(full)
    assert summary(status) == ("Failed", "Interrupted", "True", "False", "FlushNotReported")
    assert 'interrupted (Evicted: Usage of EmptyDir volume "scratch" exceeds the limit' in status["message"]
    # A DisruptionTarget that is not True (the disruption was called off) changes nothing.
    called_off = disrupted(ended_pod(0, flushed()), "PreemptionByScheduler", "no", status="False")
    assert summary(derive(called_off))[:2] == ("Succeeded", "SessionSucceeded")


def test_a_pod_stopped_at_its_active_deadline_has_its_own_reason() -> None:
    late = ended_pod(0, flushed(), phase="Failed")
    late["status"]["reason"] = "DeadlineExceeded"
    late["status"]["message"] = "Pod was active on the node longer than the specified deadline"
    status = derive(late)
    assert summary(status) == ("Failed", "DeadlineExceeded", "True", "True", "FlushComplete")
    assert "activeDeadlineSeconds" in status["message"] and "the final flush completed" in status["message"]
    # A sandbox that ignored its SIGTERM and was killed at the deadline is still the deadline, not a failure.
    stubborn = ended_pod(137, None, phase="Failed", sync_code=137)
    stubborn["status"]["reason"] = "DeadlineExceeded"
    status = derive(stubborn)
    assert summary(status) == ("Failed", "DeadlineExceeded", "True", "False", "FlushNotReported")
    assert "did not report a final flush" in status["message"]


@pytest.mark.parametrize(
    "error",
    [
        f"{ALREADY_EXISTS}: /mnt/memory/user-preferences",
        f"{NO_SESSIONS_TOKEN}: ANTHROPIC_WORK_SECRET is empty or not set",
        f"{CANNOT_CREATE} /mnt/memory/x: Permission denied; {MAKE_WRITABLE}",
        "failed to download memory store memory_store_id=memstore_01aa: 503 api_error",
    ],
)
def test_parse_mount_failure_keeps_the_documented_message(error: str) -> None:
    assert outcome.parse_termination_message(mount_failed(error)) == rp.MountFailure("memstore_01aa", error)


def test_parse_mount_failure_tolerates_odd_fields() -> None:
    assert outcome.parse_termination_message(mount_failed("boom", store=None)) == rp.MountFailure(
        None, "boom"
    )
    missing = outcome.parse_termination_message('{"phase":"mount_failed","store":7}')
    assert missing == rp.MountFailure(None, "memsync mount failed without saying why")
    long = outcome.parse_termination_message(mount_failed("x" * 10_000))
    assert isinstance(long, rp.MountFailure) and len(long.error) == rp.MESSAGE_LIMIT


def test_parse_flush_report() -> None:
    report = outcome.parse_termination_message(flushed())
    assert report == rp.FlushReport(
        complete=True,
        stores={"memstore_01aa": rp.StoreCounts(4, 1, 0, 0, 0), "memstore_02bb": rp.StoreCounts()},
    )


@pytest.mark.parametrize("complete", ["true", 1, None, "yes"])
def test_a_flush_is_complete_only_when_it_says_true(complete: Any) -> None:
    report = outcome.parse_termination_message(
        json.dumps({"phase": "flushed", "complete": complete, "stores": {}})
    )
    assert report == rp.FlushReport(complete=False)


def test_parse_flush_report_defaults_bad_counts_to_zero() -> None:
    text = json.dumps(
        {
            "phase": "flushed",
            "complete": False,
            "stores": {
                "memstore_a": {"uploaded": "3", "unsent": 2, "refused": -4, "conflicts": None},
                "memstore_b": 5,
            },
        }
    )
    assert outcome.parse_termination_message(text) == rp.FlushReport(
        False, {"memstore_a": rp.StoreCounts(unsent=2)}
    )


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "   ",
        42,
        "not json",
        "[1,2,3]",
        '"a string"',
        '{"phase":"unknown"}',
        '{"stores":{}}',
        '{"phase":"mounted"',
    ],
)
def test_unreadable_messages_are_not_reports(text: Any) -> None:
    assert outcome.parse_termination_message(text) is None


def test_the_json_line_is_found_in_a_log_tail() -> None:
    # FallbackToLogsOnError hands over the tail of the log when the message file is empty.
    tail = "\n".join(["2026-01-01 INFO starting", mount_failed("boom"), "Traceback: ...", "{not json"])
    assert outcome.parse_termination_message(tail) == rp.MountFailure("memstore_01aa", "boom")
    assert outcome.parse_termination_message(MOUNTED + "\n") == rp.MountReport(
        {"memstore_01aa": 12, "memstore_02bb": 3}
    )


# --------------------------------------------------------------------------------------------------
# Pod views
# --------------------------------------------------------------------------------------------------


def test_pod_view_tolerates_missing_and_odd_fields() -> None:
    for odd in (
        {},
        {"metadata": None, "status": None},
        {"status": {"initContainerStatuses": "x", "containerStatuses": [None, 3, {"name": "sandbox"}]}},
        {"status": {"containerStatuses": [{"name": "sandbox", "state": {"terminated": {"exitCode": True}}}]}},
    ):
        view = podview.pod_view(odd)
        assert view.phase == "Pending"
        assert view.mount.state == "absent"
    sandbox = podview.pod_view(
        {"status": {"containerStatuses": [{"name": "sandbox", "state": {"terminated": {"exitCode": True}}}]}}
    ).sandbox
    assert sandbox.state == "terminated" and sandbox.exit_code is None
    assert (
        podview.pod_view({"status": {"containerStatuses": [{"name": "sandbox"}]}}).sandbox.state == "waiting"
    )


def test_pod_view_reads_states() -> None:
    view = podview.pod_view(ended_pod(3, flushed(), deleting=True))
    assert view.deleting and view.phase == "Succeeded"
    assert view.sandbox == podview.ContainerView(
        state="terminated", exit_code=3, reason="Error", finished_at="2026-01-01T00:10:00Z"
    )
    assert view.sync.message == flushed()
    assert view.mount.finished_at == "2026-01-01T12:01:00Z"


# --------------------------------------------------------------------------------------------------
# Phases
# --------------------------------------------------------------------------------------------------


def test_a_new_pod_is_pending() -> None:
    status = derive(pod())
    assert summary(status) == ("Pending", "PodPending", "False", "Unknown", "SessionActive")
    assert status["podName"] == "s1-sandbox"
    assert status["observedGeneration"] == 1
    assert status["stores"] == [
        {"memoryStoreId": "memstore_01aa", "mountPath": "/mnt/memory/user-preferences"},
        {"memoryStoreId": "memstore_02bb", "mountPath": "/mnt/memory/team-notes"},
    ]
    assert "lastSyncTime" not in status
    assert cond(status, "Ready")["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_a_stuck_init_container_says_why() -> None:
    p = pod(
        pod_status(
            "Pending",
            [
                waiting("memsync-mount", "ImagePullBackOff", message="back-off pulling image"),
                waiting("memsync-sync"),
            ],
            [waiting("sandbox")],
        )
    )
    status = derive(p)
    assert status["phase"] == "Pending"
    assert "ImagePullBackOff: back-off pulling image" in cond(status, "StoresMounted")["message"]
    assert "ImagePullBackOff" in status["message"]


def test_mount_running_is_mounting() -> None:
    p = pod(pod_status("Pending", [running("memsync-mount"), waiting("memsync-sync")], [waiting("sandbox")]))
    status = derive(p)
    assert summary(status) == ("Mounting", "Mounting", "False", "Unknown", "SessionActive")
    assert cond(status, "StoresMounted")["reason"] == "Mounting"


def test_mounted_but_not_running_yet_is_still_mounting() -> None:
    p = pod(pod_status("Pending", [MOUNT_OK, running("memsync-sync")], [waiting("sandbox")]))
    status = derive(p)
    assert summary(status) == ("Mounting", "Mounting", "True", "Unknown", "SessionActive")
    assert cond(status, "StoresMounted")["message"] == "memsync-mount materialised 15 memories from 2 stores"
    assert [s["memoriesMounted"] for s in status["stores"]] == [12, 3]
    assert status["lastSyncTime"] == "2026-01-01T12:01:00Z"


def test_a_sandbox_that_cannot_start_is_named() -> None:
    p = pod(
        pod_status(
            "Pending",
            [MOUNT_OK, running("memsync-sync", ready=True)],
            [waiting("sandbox", "ErrImagePull", message="not found")],
        )
    )
    status = derive(p)
    assert status["phase"] == "Mounting"
    assert status["message"] == "sandbox is waiting: ErrImagePull: not found"


def test_running_needs_the_sandbox_and_a_ready_sidecar() -> None:
    status = derive(running_pod())
    assert summary(status) == ("Running", "SessionRunning", "True", "Unknown", "SessionActive")
    assert cond(status, "Ready")["status"] == "True"

    not_ready = derive(running_pod(sync_ready=False))
    assert summary(not_ready)[:2] == ("Mounting", "SyncNotReady")


def test_running_stays_running_when_the_sidecar_turns_unready() -> None:
    before = derive(running_pod())
    after = derive(running_pod(sync_ready=False), before, now=T1)
    assert after["phase"] == "Running"
    ready = cond(after, "Ready")
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "False",
        "SyncNotReady",
        "2026-01-01T12:05:00Z",
    )
    # StoresMounted did not flip: its time stays.
    assert (
        cond(after, "StoresMounted")["lastTransitionTime"]
        == cond(before, "StoresMounted")["lastTransitionTime"]
    )


def test_phases_never_move_backwards() -> None:
    flushing = derive(running_pod(deleting=True))
    assert flushing["phase"] == "Flushing"
    # A stale event (an older Pod state) arrives afterwards.
    again = derive(running_pod(), flushing, now=T1)
    assert again["phase"] == "Flushing"


def test_a_terminating_pod_is_flushing() -> None:
    status = derive(running_pod(deleting=True))
    assert summary(status) == ("Flushing", "Flushing", "True", "Unknown", "Flushing")
    assert "terminating" in status["message"]


def test_an_ended_sandbox_with_the_sidecar_still_running_is_flushing() -> None:
    p = pod(
        pod_status("Running", [MOUNT_OK, running("memsync-sync", ready=True)], [terminated("sandbox", 0)])
    )
    status = derive(p)
    assert status["phase"] == "Flushing"
    assert "the sandbox container has ended" in status["message"]


def test_success_needs_a_clean_exit_and_a_complete_flush() -> None:
    status = derive(ended_pod(0, flushed()))
    assert summary(status) == ("Succeeded", "SessionSucceeded", "True", "True", "FlushComplete")
    assert cond(status, "Flushed")["message"] == (
        "the final flush completed: uploaded 4, deleted 1, conflicts 0, refused 0, unsent 0 across 2 stores"
    )
    assert status["stores"][0] == FIRST_STORE_RESULT
    assert status["lastSyncTime"] == "2026-01-01T12:30:00Z"


def test_a_complete_flush_with_refused_files_says_they_never_reached_the_store() -> None:
    message = flushed(
        True,
        memstore_01aa={
            "uploaded": 1,
            "deleted": 0,
            "conflicts": 0,
            "refused": 2,
            "unsent": 0,
            "refused_paths": ["big.md", "notes/blob.bin"],
        },
    )
    status = derive(ended_pod(0, message))
    assert summary(status) == ("Succeeded", "SessionSucceeded", "True", "True", "FlushComplete")
    assert cond(status, "Flushed")["message"].endswith(
        "refused 2, unsent 0 across 1 store; "
        "2 refused files never reached the store (/big.md, /notes/blob.bin)"
    )
    assert status["stores"][0]["refused"] == 2
    assert status["stores"][0]["refusedPaths"] == ["big.md", "notes/blob.bin"]


def test_an_incomplete_flush_fails_the_session_and_names_the_stores() -> None:
    message = flushed(
        False,
        memstore_01aa={"uploaded": 1, "deleted": 0, "conflicts": 2, "refused": 1, "unsent": 3},
        memstore_02bb={"uploaded": 0, "deleted": 0, "conflicts": 0, "refused": 0, "unsent": 0},
    )
    status = derive(ended_pod(0, message, sync_code=1))
    assert summary(status) == ("Failed", "FlushIncomplete", "True", "False", "FlushIncomplete")
    assert "unsent 3" in status["message"] and "(unsent in memstore_01aa)" in status["message"]
    assert (
        status["stores"][0]["unsent"],
        status["stores"][0]["conflicts"],
        status["stores"][0]["refused"],
    ) == (3, 2, 1)


@pytest.mark.parametrize(
    "message", [None, "", "panic: runtime error", '{"phase":"flushed"', '{"phase":"mounted"}']
)
def test_a_missing_or_unreadable_flush_report_is_not_a_success(message: str | None) -> None:
    status = derive(ended_pod(0, message))
    assert summary(status) == ("Failed", "FlushNotReported", "True", "False", "FlushNotReported")
    assert "edits made since its last sync may be lost" in status["message"]


@pytest.mark.parametrize("sync_code", [137, 143, 2])
def test_a_complete_report_from_a_sidecar_that_did_not_exit_cleanly_is_not_trusted(sync_code: int) -> None:
    """The preStop ``memsync flush`` writes the termination log too (complete, while the agent may still be
    writing); if the sidecar is then killed (grace period over) its final flush never reported: the message
    left is the earlier one. A complete final flush always exits 0, so anything else is unconfirmed."""
    status = derive(ended_pod(0, flushed(), sync_code=sync_code))
    assert summary(status) == ("Failed", "FlushNotReported", "True", "False", "FlushNotReported")
    assert f"exit code {sync_code}" in cond(status, "Flushed")["message"]
    assert "uploaded" not in status["stores"][0]  # counts of an earlier flush are not the final result


def test_a_failed_sandbox_fails_the_session_but_keeps_the_flush_result() -> None:
    status = derive(ended_pod(2, flushed(), phase="Failed"))
    assert summary(status) == ("Failed", "SandboxFailed", "True", "True", "FlushComplete")
    assert status["message"] == "the sandbox container exited with code 2 (Error)"
    both = derive(ended_pod(2, None, phase="Failed"))
    assert cond(both, "Ready")["reason"] == "SandboxFailed"
    assert "did not report a final flush" in both["message"]


def test_a_sandbox_ended_by_deletion_is_not_a_failure() -> None:
    status = derive(ended_pod(143, flushed(), phase="Failed", deleting=True))
    assert summary(status) == ("Succeeded", "SessionSucceeded", "True", "True", "FlushComplete")


def test_a_sandbox_killed_at_the_grace_deadline_has_its_own_reason() -> None:
    # PID 1 ignored SIGTERM: SIGKILL at the deadline, and the sidecar's final flush got the 2 s minimum.
    status = derive(ended_pod(137, None, phase="Failed", deleting=True, sync_code=137))
    assert summary(status) == ("Failed", "SandboxKilled", "True", "False", "FlushNotReported")
    assert "ignored SIGTERM" in status["message"] and "tini" in status["message"]
    assert "did not report a final flush" in status["message"]
    # Its memory may still have been flushed; the reason stays, the Flushed condition says so.
    flushed_anyway = derive(ended_pod(137, flushed(), phase="Failed", deleting=True))
    assert summary(flushed_anyway) == ("Failed", "SandboxKilled", "True", "True", "FlushComplete")


def test_an_oom_kill_or_a_kill_outside_deletion_is_not_a_deadline_kill() -> None:
    oom = ended_pod(137, flushed(), phase="Failed", deleting=True)
    oom["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = "OOMKilled"
    assert cond(derive(oom), "Ready")["reason"] == "SessionSucceeded"
    assert cond(derive(ended_pod(137, flushed(), phase="Failed")), "Ready")["reason"] == "SandboxFailed"


@pytest.mark.parametrize(
    "error",
    [
        f"{ALREADY_EXISTS}: /mnt/memory/user-preferences",
        f"{NO_SESSIONS_TOKEN}: ANTHROPIC_WORK_SECRET is empty or not set",
        f"{CANNOT_CREATE} /mnt/memory/user-preferences: [Errno 13] Permission denied; {MAKE_WRITABLE}",
    ],
)
@pytest.mark.parametrize("pod_phase", ["Pending", "Failed"])
def test_a_failed_mount_surfaces_its_own_message(error: str, pod_phase: str) -> None:
    p = pod(
        pod_status(
            pod_phase,
            [terminated("memsync-mount", 1, mount_failed(error)), waiting("memsync-sync")],
            [waiting("sandbox")],
        )
    )
    status = derive(p)
    assert summary(status) == ("Failed", "MountFailed", "False", "True", "NothingToFlush")
    assert cond(status, "Ready")["message"] == error
    assert cond(status, "StoresMounted")["reason"] == "MountFailed"
    assert cond(status, "StoresMounted")["message"] == error
    assert status["message"] == error


def test_a_failed_mount_without_a_report_still_fails_clearly() -> None:
    p = pod(
        pod_status("Failed", [terminated("memsync-mount", 2, "Traceback ..."), waiting("memsync-sync")], [])
    )
    status = derive(p)
    assert status["phase"] == "Failed"
    assert status["message"] == "memsync-mount exited with code 2 (Error) without a readable report"


def test_a_pod_that_failed_before_any_container_ran() -> None:
    p = pod({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."})
    status = derive(p)
    assert summary(status) == ("Failed", "PodFailed", "False", "True", "NothingToFlush")
    assert "The node was low on resource: memory." in status["message"]


def test_a_pod_that_vanished_while_running_lost_its_final_flush() -> None:
    status = derive(running_pod(), derive(running_pod()), pod_gone=True, now=T1)
    assert summary(status) == ("Failed", "PodLost", "True", "False", "FlushNotReported")
    assert "disappeared before its containers reported an end" in status["message"]


def test_a_pod_that_vanished_before_mounting_had_nothing_to_flush() -> None:
    status = derive(pod(), pod_gone=True)
    assert summary(status) == ("Failed", "PodLost", "False", "True", "NothingToFlush")
    assert "before the stores were mounted" in status["message"]


def test_the_last_state_of_a_deleted_pod_decides() -> None:
    status = derive(ended_pod(0, flushed(), deleting=True), derive(running_pod()), pod_gone=True)
    assert status["phase"] == "Succeeded"


# --------------------------------------------------------------------------------------------------
# Transitions over time
# --------------------------------------------------------------------------------------------------


def test_an_outcome_is_final() -> None:
    done = derive(ended_pod(0, flushed()))
    assert derive(running_pod(), done, now=T1) == done
    assert derive(pod(), done, now=T1) == done


def test_a_late_flush_report_still_lands_on_a_final_outcome() -> None:
    without = derive(ended_pod(0, None))
    assert without["phase"] == "Failed"
    late = derive(ended_pod(0, flushed()), without, now=T1)
    assert late["phase"] == "Succeeded"
    assert cond(late, "Flushed")["lastTransitionTime"] == "2026-01-01T12:05:00Z"


def test_a_refusal_gives_way_to_the_pod() -> None:
    refused = sm_derive.refusal_status(
        None, reason=ph.SECRET_NOT_FOUND, message="no secret", stores=STORES, generation=1, now=T0
    )
    status = derive(pod(), refused, now=T1)
    assert status["phase"] == "Pending"
    assert status["podName"] == "s1-sandbox"
    ready = cond(status, "Ready")
    assert (ready["reason"], ready["lastTransitionTime"]) == (
        "PodPending",
        "2026-01-01T12:00:00Z",
    )  # still False


def test_the_same_inputs_give_the_same_status() -> None:
    for p in (pod(), running_pod(), running_pod(deleting=True), ended_pod(0, flushed()), ended_pod(1, None)):
        first = derive(p)
        second = derive(p, first, now=T1)
        assert second == first
        assert sm_derive.status_changes(first, second) == {}


def test_transition_times_move_only_when_a_condition_flips() -> None:
    a = derive(pod())
    b = derive(running_pod(), a, now=T1)
    times = {c["type"]: c["lastTransitionTime"] for c in b["conditions"]}
    assert times == {
        "Ready": "2026-01-01T12:05:00Z",
        "StoresMounted": "2026-01-01T12:05:00Z",
        "Flushed": "2026-01-01T12:00:00Z",
    }
    # Reason and message change without a flip; the time does not.
    c = derive(running_pod(deleting=True), b, now=T1 + timedelta(minutes=1))
    assert cond(c, "Flushed")["reason"] == "Flushing"
    assert cond(c, "Flushed")["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_observed_generation_follows_the_object() -> None:
    status = derive(running_pod(), generation=7)
    assert status["observedGeneration"] == 7
    assert {c["observedGeneration"] for c in status["conditions"]} == {7}
    none = derive(running_pod(), generation=None)
    assert "observedGeneration" not in none
    assert all("observedGeneration" not in c for c in none["conditions"])


def test_conditions_of_other_writers_are_kept() -> None:
    foreign = {
        "type": "example.com/Audited",
        "status": "True",
        "reason": "Done",
        "message": "",
        "lastTransitionTime": "x",
    }
    status = derive(running_pod(), {"conditions": [foreign, "junk", {"no": "type"}]})
    assert status["conditions"][-1] == foreign
    assert [c["type"] for c in status["conditions"]] == [
        "Ready",
        "StoresMounted",
        "Flushed",
        "example.com/Audited",
    ]


def test_store_results_survive_events_without_reports() -> None:
    mounted = derive(pod(pod_status("Pending", [MOUNT_OK, running("memsync-sync")], [waiting("sandbox")])))
    # A Pod state without the mount container (odd, but possible in a partial status) keeps the counts.
    later = derive(pod(pod_status("Running", [], [running("sandbox")])), mounted, now=T1)
    assert [s.get("memoriesMounted") for s in later["stores"]] == [12, 3]
    assert later["lastSyncTime"] == mounted["lastSyncTime"]


def test_a_store_only_the_pod_knows_is_listed_last() -> None:
    status = derive(pod(pod_status("Pending", [MOUNT_OK], [])), stores={"memstore_02bb": None})
    assert [s["memoryStoreId"] for s in status["stores"]] == ["memstore_02bb", "memstore_01aa"]
    assert "mountPath" not in status["stores"][0]


def test_messages_are_bounded() -> None:
    p = pod(pod_status("Failed", [terminated("memsync-mount", 1, mount_failed("y" * 5000))], []))
    status = derive(p)
    assert len(status["message"]) == rp.MESSAGE_LIMIT
    assert all(len(c["message"]) <= rp.MESSAGE_LIMIT for c in status["conditions"])


# --------------------------------------------------------------------------------------------------
# Refusals, lost Pods, patches
# --------------------------------------------------------------------------------------------------


def test_refusal_status() -> None:
    previous = derive(pod())  # e.g. a stale podName from an older attempt
    status = sm_derive.refusal_status(
        previous, reason=ph.DUPLICATE_SESSION, message="held by s0", stores=STORES, generation=2, now=T1
    )
    assert summary(status) == ("Failed", "DuplicateSession", "False", "True", "NothingToFlush")
    assert status["message"] == "held by s0"
    assert "podName" not in status
    assert ph.is_refusal(status)
    assert not ph.is_refusal(derive(ended_pod(1, None)))
    assert not ph.is_refusal({})


def test_lost_pod_status() -> None:
    run = derive(running_pod())
    lost = sm_derive.lost_pod_status(run, pod_name="s1-sandbox", stores=STORES, generation=1, now=T1)
    assert summary(lost) == ("Failed", "PodLost", "True", "False", "FlushNotReported")
    assert [s["memoriesMounted"] for s in lost["stores"]] == [12, 3]
    never = sm_derive.lost_pod_status(
        derive(pod()), pod_name="s1-sandbox", stores=STORES, generation=1, now=T1
    )
    assert summary(never) == ("Failed", "PodLost", "False", "True", "NothingToFlush")
    done = derive(ended_pod(0, flushed()))
    assert sm_derive.lost_pod_status(done, pod_name="s1-sandbox", stores=STORES, generation=1, now=T1) == done
    gave_up = sm_derive.lost_pod_status(
        run,
        pod_name="s1-sandbox",
        stores=STORES,
        generation=1,
        now=T1,
        reason=ph.DELETION_TIMED_OUT,
        why="gave up",
    )
    assert summary(gave_up) == ("Failed", "DeletionTimedOut", "True", "False", "FlushNotReported")
    assert gave_up["message"].startswith("gave up; memsync-sync did not report a final flush")


def test_with_generation() -> None:
    status = derive(running_pod())
    bumped = sm_derive.with_generation(status, 3)
    assert bumped["observedGeneration"] == 3
    assert {c["observedGeneration"] for c in bumped["conditions"]} == {3}
    assert bumped["phase"] == status["phase"]
    assert sm_derive.with_generation(status, None) == status


def test_status_changes_is_a_top_level_merge_patch() -> None:
    old = {"phase": "Running", "message": "a", "kopf": {"x": 1}, "lastSyncTime": "t"}
    new = {"phase": "Flushing", "message": "a"}
    assert sm_derive.status_changes(old, new) == {"phase": "Flushing", "lastSyncTime": None}
    assert sm_derive.status_changes(None, new) == new


# --------------------------------------------------------------------------------------------------
# Conformance with the CRD (nothing the controller writes is pruned) and robustness
# --------------------------------------------------------------------------------------------------

_STATUS_SCHEMA = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
_REASON = re.compile(_STATUS_SCHEMA["properties"]["conditions"]["items"]["properties"]["reason"]["pattern"])


def _conforms(status: dict[str, Any]) -> None:
    assert _prune(status, _STATUS_SCHEMA) == status, "the CRD would prune part of this status"
    SessionMemoryStatus.model_validate(status)
    assert status["phase"] in PHASES
    assert [c["type"] for c in status["conditions"]][:3] == ["Ready", "StoresMounted", "Flushed"]
    for c in status["conditions"]:
        assert _REASON.fullmatch(c["reason"]), c["reason"]
        assert c["status"] in ("True", "False", "Unknown")
        assert set(c) >= {"type", "status", "reason", "message", "lastTransitionTime"}


@pytest.mark.parametrize(
    "p",
    [
        pod(),
        running_pod(),
        running_pod(deleting=True),
        ended_pod(0, flushed()),
        ended_pod(1, flushed(False), phase="Failed"),
    ],
)
def test_statuses_fit_the_crd(p: dict[str, Any]) -> None:
    _conforms(derive(p))
    _conforms(
        sm_derive.refusal_status(
            None, reason=ph.INVALID_SPEC, message="m", stores=STORES, generation=1, now=T0
        )
    )
    _conforms(sm_derive.lost_pod_status(None, pod_name="x", stores=STORES, generation=1, now=T0))


_messages = hs.one_of(
    hs.none(),
    hs.text(max_size=40),
    hs.sampled_from([MOUNTED, flushed(), flushed(False), mount_failed("boom"), '{"phase":"flushed"}', "[]"]),
)


@hs.composite
def _container(draw: hs.DrawFn, name: str) -> dict[str, Any]:
    kind = draw(hs.sampled_from(["waiting", "running", "terminated", "absent", "junk"]))
    if kind == "waiting":
        return waiting(name, draw(hs.sampled_from(["PodInitializing", "ErrImagePull", "CrashLoopBackOff"])))
    if kind == "running":
        return running(name, ready=draw(hs.booleans()))
    if kind == "terminated":
        return terminated(name, draw(hs.sampled_from([0, 1, 2, 137, 143])), draw(_messages))
    if kind == "junk":
        return {
            "name": name,
            "state": draw(hs.sampled_from([None, [], {"terminated": "x"}, {"running": None}])),
        }
    return {}


@hs.composite
def _pods(draw: hs.DrawFn) -> dict[str, Any]:
    init = [c for c in (draw(_container("memsync-mount")), draw(_container("memsync-sync"))) if c]
    main = [c for c in (draw(_container("sandbox")),) if c]
    phase = draw(hs.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]))
    return pod(pod_status(phase, init, main), deleting=draw(hs.booleans()))


@settings(max_examples=300, deadline=None)
@given(first=_pods(), second=_pods(), gone=hs.booleans())
def test_any_pod_sequence_gives_a_valid_stable_status(
    first: dict[str, Any], second: dict[str, Any], gone: bool
) -> None:
    a = derive(first)
    b = derive(second, a, now=T1, pod_gone=gone)
    for status in (a, b):
        _conforms(status)
    # Deriving again from the same Pod changes nothing (no status churn, no repeated events).
    assert derive(second, b, now=T1 + timedelta(hours=1), pod_gone=gone) == b
    # Outcomes are final; non-final phases never go backwards.
    if a["phase"] in ph.TERMINAL_PHASES:
        assert b["phase"] in ph.TERMINAL_PHASES
    elif b["phase"] not in ph.TERMINAL_PHASES:
        order = ["Pending", "Mounting", "Running", "Flushing"]
        assert order.index(b["phase"]) >= order.index(a["phase"])


def test_the_store_count_is_written_for_the_stores_column() -> None:
    assert derive(pod())["storeCount"] == 2
    assert derive(ended_pod(0, flushed()), stores={"memstore_01aa": None})["storeCount"] == 1
    refused = sm_derive.refusal_status(
        None, reason=ph.INVALID_SPEC, message="m", stores=STORES, generation=1, now=T0
    )
    assert refused["storeCount"] == 2


def test_without_spec_stores_the_store_count_is_what_the_pod_reported() -> None:
    """A SessionMemory without spec.stores (read from the session at mount): the count comes from the
    reports, and each reported store is listed."""
    status = derive(ended_pod(0, flushed()), stores={})
    assert status["storeCount"] == len(status["stores"]) > 0


# --------------------------------------------------------------------------------------------------
# A sidecar that never starts
# --------------------------------------------------------------------------------------------------

MOUNTED_AT = datetime(2026, 1, 1, 12, 1, tzinfo=UTC)  # MOUNT_OK's finishedAt
#: What a kubelet with the native-sidecar startup defect leaves: the sidecar restarted and runs, but its
#: startupProbe is never run again, so it never counts as started and the sandbox waits forever.
UNSTARTED_SYNC = {**running("memsync-sync"), "started": False, "restartCount": 1}


def stuck_pod(**kw: Any) -> dict[str, Any]:
    return pod(pod_status("Pending", [MOUNT_OK, UNSTARTED_SYNC], [waiting("sandbox")]), **kw)


def test_a_sidecar_that_never_started_is_overdue_once_its_time_is_up() -> None:
    assert outcome.sidecar_start_overdue(stuck_pod(), MOUNTED_AT + timedelta(seconds=299), 300) is None
    why = outcome.sidecar_start_overdue(stuck_pod(), MOUNTED_AT + timedelta(seconds=300), 300)
    assert why is not None and "300 s after the stores were mounted" in why and "running" in why


@pytest.mark.parametrize(
    "p",
    [
        running_pod(sync_ready=False),  # started (not ready yet): the sandbox runs
        pod(pod_status("Pending", [MOUNT_OK, running("memsync-sync")], [waiting("sandbox")])),  # started
        stuck_pod(deleting=True),  # the deletion owns it
        pod(pod_status("Pending", [running("memsync-mount"), waiting("memsync-sync")], [waiting("sandbox")])),
        pod(pod_status("Failed", [terminated("memsync-mount", 1, mount_failed("x"))], [waiting("sandbox")])),
        pod(pod_status("Pending", [], [])),  # nothing reported yet
    ],
)
def test_only_a_mounted_pod_whose_sidecar_never_started_is_ever_overdue(p: dict[str, Any]) -> None:
    assert outcome.sidecar_start_overdue(p, MOUNTED_AT + timedelta(days=1), 300) is None


def test_the_operators_verdict_stands_when_the_pod_then_ends() -> None:
    failed = sm_derive.lost_pod_status(
        derive(stuck_pod()),
        pod_name="s1-sandbox",
        stores=STORES,
        generation=1,
        now=T0,
        reason=ph.SIDECAR_NOT_STARTED,
        why="memsync-sync had not started",
        never_ran=True,
    )
    assert summary(failed) == ("Failed", "SidecarNotStarted", "True", "True", "NothingToFlush")
    deleted = pod(
        pod_status("Failed", [MOUNT_OK, terminated("memsync-sync", 143)], [waiting("sandbox")]), deleting=True
    )
    assert derive(deleted, failed, pod_gone=True) == failed
