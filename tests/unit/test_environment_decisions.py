"""The environment poll loop's decisions, as pure functions."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memsync.contracts import runner
from memsync.controller.environment import decisions as d
from memsync.crd import agentenv as a
from memsync.crd.agentenv import AgentEnvironmentSpec
from memsync.crd.models import sandbox_template, validate_spec

ENV = {"metadata": {"name": "team-a", "namespace": "agents", "uid": "uid-1"}}
ITEM = d.WorkItem(
    id="work_1", environment_id="env_1", type="session", session_id="sesn_01AbC", secret="c2VjcmV0"
)
SPEC = AgentEnvironmentSpec.model_validate(
    {
        "environmentId": "env_1",
        "environmentKeySecretRef": {"name": "k", "key": "key"},
        "apiBaseUrl": "http://store:8700",
        "template": sandbox_template(
            {
                "image": "img:1",
                "env": [{"name": "ANTHROPIC_WORK_ID", "value": "mine"}, {"name": "X", "value": "1"}],
            },
            memsync={"env": [{"name": "HTTPS_PROXY", "value": "http://p:3128"}]},
        ),
        "sync": {"intervalSeconds": 20},
    }
)
SESSION = {
    "id": "sesn_01AbC",
    "resources": [
        {"type": "memory_store", "memory_store_id": "memstore_a", "name": "Notes",
         "mount_path": "/mnt/memory/notes", "access": "read_write"},
        {"type": "memory_store", "memory_store_id": "memstore_b", "name": "Shared",
         "mount_path": "/mnt/memory/shared", "access": "read_only"},
        {"type": "file", "file_id": "f"},
    ],
}  # fmt: skip


def test_items_are_created_failed_or_stopped() -> None:
    assert d.decide_item(ITEM, None).action == "create"
    health = d.WorkItem("work_2", "env_1", "healthcheck", "", None)
    assert d.decide_item(health, None).action == "stop"
    bare = d.WorkItem("work_3", "env_1", "session", "sesn_x", None)
    with_stores = d.decide_item(bare, True)
    assert with_stores.action == "fail"
    assert with_stores.message.startswith("the work item carried no sessions token")
    assert d.decide_item(bare, False).action == "fail"
    assert "never gives the environment key" in d.decide_item(bare, False).message


def test_work_items_from_the_wire() -> None:
    raw = {
        "id": "work_1",
        "environment_id": "env_1",
        "data": {"type": "session", "id": "sesn_1"},
        "secret": "  ",
    }
    assert d.WorkItem.from_wire(raw).secret is None
    assert d.WorkItem.from_wire({**raw, "secret": "abc"}).secret == "abc"


def test_names_are_dns_labels_distinct_per_exact_session_id() -> None:
    a, b = d.object_name("sesn_01AbC"), d.object_name("sesn_01abc")
    assert a != b
    long = d.object_name("sesn_" + "x" * 200)
    for name in (a, b, long, d.object_name("sesn_")):
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
        assert len(name + "-sandbox") <= 63
    assert d.secret_name("sesn_01AbC") == a + "-work"


def test_capacity_and_backoff() -> None:
    assert d.capacity(3, 1) == 2
    assert d.capacity(3, 5) == 0
    assert [d.backoff_seconds(n, 0.0) for n in (1, 2, 3, 7, 8, 50)] == [1, 2, 4, 60, 60, 60]
    assert d.backoff_seconds(2, 0.5) == 2.5


def test_stores_come_from_the_session_and_are_checked() -> None:
    stores = d.stores_from_session(SESSION)
    assert stores == [
        {
            "memoryStoreId": "memstore_a",
            "name": "Notes",
            "access": "read_write",
            "mountPath": "/mnt/memory/notes",
        },
        {
            "memoryStoreId": "memstore_b",
            "name": "Shared",
            "access": "read_only",
            "mountPath": "/mnt/memory/shared",
        },
    ]
    bad = {
        "resources": [
            {"type": "memory_store", "memory_store_id": "memstore_a", "name": "n", "mount_path": "/etc/x"}
        ]
    }
    with pytest.raises(
        d.StoreResolutionError, match=r"resources\[0\] cannot be mounted: resources\[0\]\.mountPath"
    ):
        d.stores_from_session(bad)
    with pytest.raises(d.StoreResolutionError, match="no memory stores"):
        d.stores_to_mount({"resources": []})


def test_the_session_memory_is_a_valid_owned_spec_with_the_runner_contract() -> None:
    stores = d.stores_from_session(SESSION)
    smem = d.session_memory_manifest(ENV, SPEC, ITEM, stores)
    spec = validate_spec(smem["spec"])
    assert spec.session_id == "sesn_01AbC"
    assert spec.sync.interval_seconds == 20
    assert [s.effective_mount_path for s in spec.stores] == ["/mnt/memory/notes", "/mnt/memory/shared"]
    meta = smem["metadata"]
    assert meta["name"] == d.object_name("sesn_01AbC")
    assert meta["ownerReferences"][0]["kind"] == "AgentEnvironment"
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    env = {e["name"]: e for e in spec.template.spec.sandbox["env"]}
    assert set(runner.ALL) <= set(env)
    assert env["ANTHROPIC_WORK_ID"]["value"] == "work_1"  # ours replaces the user's
    assert env["X"]["value"] == "1"
    assert env["ANTHROPIC_WORK_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": d.secret_name(ITEM.session_id),
        "key": "secret",
    }
    assert "memstore_b" in env["MEMSYNC_STORES"]["value"]
    assert smem["spec"]["template"]["spec"]["memsync"]["env"] == [
        {"name": "HTTPS_PROXY", "value": "http://p:3128"}
    ]
    secret = d.work_secret_manifest(ENV, ITEM)
    assert secret["stringData"] == {"secret": "c2VjcmV0"}
    assert secret["metadata"]["name"] == spec.work_item_secret_ref.name


def _smem(phase: str | None, finished: datetime | None = None, deleting: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if finished:
        status["conditions"] = [
            {
                "type": "Ready",
                "status": "False",
                "lastTransitionTime": finished.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        ]
    meta: dict[str, Any] = {"name": f"s-{phase}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": status}


def test_retention_and_activity() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    old = _smem("Succeeded", now - timedelta(seconds=100))
    young = _smem("Failed", now - timedelta(seconds=10))
    running = _smem("Running")
    assert d.expired([old, young, running], now, 60, set()) == [old]
    assert d.expired([old, young], now, 0, set()) == [old, young]
    owned = {**old, "metadata": {**old["metadata"], "annotations": {a.ANNOTATION_WORK_ID: "work_9"}}}
    assert d.expired([owned], now, 0, set()) == []  # its work item is not stopped yet: kept
    assert d.expired([owned], now, 0, {"work_9"}) == [owned]
    assert [d.is_active(s) for s in (old, running, _smem(None), _smem("Running", deleting=True))] == [
        False,
        True,
        True,
        False,
    ]


def test_environment_status_phases_conditions_and_counts() -> None:
    tally = {"claimed": 5, "itemsFailed": 1, "retiredSucceeded": 2, "retiredFailed": 1}
    ok = d.environment_status({}, d.Observation(2, 1, 1, "2026-01-01T00:00:00Z", None), tally, "T1", 3)
    assert (ok["phase"], ok["active"], ok["claimed"], ok["succeeded"], ok["failed"]) == (
        "Polling",
        2,
        5,
        3,
        3,
    )
    assert [(c["type"], c["status"]) for c in ok["conditions"]] == [("Polling", "True"), ("Ready", "True")]
    assert ok["observedGeneration"] == 3 and "lastError" not in ok
    failing = d.environment_status(
        ok, d.Observation(2, 0, 0, None, "poll: the API is unreachable"), tally, "T2", 3
    )
    assert failing["phase"] == "Degraded"
    assert failing["lastPollTime"] == "2026-01-01T00:00:00Z"  # kept from before
    assert failing["conditions"][0]["lastTransitionTime"] == "T2"
    keyless = d.environment_status(
        failing, d.Observation(0, 0, 0, None, None, key_problem="no key"), {}, "T3", 3
    )
    assert (keyless["phase"], keyless["lastError"], keyless["conditions"][0]["reason"]) == (
        "Failed",
        "no key",
        "EnvironmentKeyUnavailable",
    )
    again = d.environment_status(
        keyless, d.Observation(0, 0, 0, None, None, key_problem="no key"), {}, "T4", 3
    )
    assert again["conditions"][0]["lastTransitionTime"] == "T2"  # False since the poll failures began


def test_status_writes_skip_a_poll_time_that_barely_moved() -> None:
    base = {"phase": "Polling", "lastPollTime": "2026-01-01T00:00:00Z"}
    assert not d.worth_writing(base, {**base, "lastPollTime": "2026-01-01T00:00:10Z"}, 30)
    assert d.worth_writing(base, {**base, "lastPollTime": "2026-01-01T00:00:31Z"}, 30)
    assert d.worth_writing(base, {**base, "phase": "Degraded"}, 30)
    assert not d.worth_writing(base, dict(base), 30)


def test_finished_session_memories_name_the_work_items_to_stop() -> None:
    smem = d.session_memory_manifest(ENV, SPEC, ITEM, d.stores_from_session(SESSION))
    assert d.work_id_of(smem) == "work_1"
    assert d.work_id_of(d.work_secret_manifest(ENV, ITEM)) == "work_1"
    running = {**smem, "status": {"phase": "Running"}}
    failed = {**smem, "status": {"phase": "Failed"}}
    assert d.items_to_stop([running], set(), set()) == []
    assert d.items_to_stop([failed], set(), set()) == ["work_1"]
    assert d.items_to_stop([failed], {"work_1"}, set()) == []
    assert d.items_to_stop([failed], set(), {"work_1"}) == []  # held: a new SessionMemory serves it
    assert d.on_existing(failed, ITEM) == "done"


def test_the_runner_contract_names_are_spelled_once() -> None:
    import ast
    from pathlib import Path

    package = Path(d.__file__).resolve().parents[2]
    where: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in runner.ALL:
                where.setdefault(str(node.value), set()).add(path.relative_to(package).as_posix())
    assert set(where) == set(runner.ALL)
    assert all(
        files <= {"contracts/runner.py", "contracts/env.py"} and len(files) == 1 for files in where.values()
    ), where


def test_pacing_worker_ids_and_retry_after() -> None:
    assert d.idle_pause(0.0, 1.0) == 1.0  # a 1 s long poll, then 1 to 3 s: polls start 2 to 4 s apart
    assert d.idle_pause(1.0, 1.0) == 3.0
    assert d.idle_pause(0.5, 0.0) == 3.0  # an instant answer still waits out the cycle
    assert d.idle_pause(0.0, 5.0) == 1.0  # and never less than 1 s after a poll
    assert d.retry_delay(1, 0.5, None) == 1.5
    assert d.retry_delay(1, 0.5, 30.0) == 30.0  # retry-after longer than the backoff: honoured
    assert d.retry_delay(7, 0.0, 3.0) == 60.0  # shorter: the backoff
    assert d.retry_delay(1, 0.0, 99999.0) == d.RETRY_AFTER_MAX_S
    assert d.worker_id(None, "ns", "env", "op-7f9", "a1b2") == "ns.env.op-7f9-a1b2"
    assert d.worker_id("team", "ns", "env", "op-7f9", "c3d4") == "team.op-7f9-c3d4"


def test_a_lost_nodes_session_memory_is_replaced_for_a_re_delivered_item() -> None:
    item = d.WorkItem(id="work_1", environment_id="env", type="session", session_id="sesn_1", secret="x")
    smem = {"metadata": {"name": "s", "annotations": {"agents.memsync.dev/work-id": "work_1"}}}
    lost = {**smem, "status": {"phase": "Failed", "conditions": [{"type": "Ready", "reason": "NodeLost"}]}}
    other = {
        **smem,
        "status": {"phase": "Failed", "conditions": [{"type": "Ready", "reason": "Interrupted"}]},
    }
    assert d.on_existing(lost, item) == "replace"  # its Pod never ended: the item came back for another
    assert d.on_existing(other, item) == "done"


def test_capacity_is_zero_while_a_session_waits_for_a_quota() -> None:
    quota = {
        "metadata": {},
        "status": {"phase": "Pending", "conditions": [{"type": "Ready", "reason": "QuotaExceeded"}]},
    }
    running = {"metadata": {}, "status": {"phase": "Running"}}
    assert d.capacity(5, 2, [running, quota]) == 0
    assert d.capacity(5, 2, [running]) == 3


def test_an_environments_sessions_fail_on_interruption_and_get_its_start_deadline() -> None:
    smem = d.session_memory_manifest(ENV, SPEC, ITEM, d.stores_from_session(SESSION))
    assert smem["spec"]["onInterruption"] == "Fail" and "startDeadlineSeconds" not in smem["spec"]
    spec = SPEC.model_copy(update={"start_deadline_seconds": 120})
    assert (
        d.session_memory_manifest(ENV, spec, ITEM, d.stores_from_session(SESSION))["spec"][
            "startDeadlineSeconds"
        ]
        == 120
    )


def test_a_resumed_hold_keeps_its_sessions_start_deadline() -> None:
    from datetime import UTC, datetime

    from memsync.controller.environment import starts

    now = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    waiting = {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {},
        "status": {"phase": "Pending"},
    }
    assert starts.resumed_hold_deadline(waiting, 600.0, now) == 300.0
    own = {**waiting, "spec": {"startDeadlineSeconds": 120}}
    assert starts.resumed_hold_deadline(own, 600.0, now) == 0.0  # past it: no heartbeat at all
    running = {**waiting, "status": {"phase": "Running"}}
    assert starts.resumed_hold_deadline(running, 600.0, now) is None  # its runner takes the lease over
    assert starts.resumed_hold_deadline(None, 600.0, now) is None
