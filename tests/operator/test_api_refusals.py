"""A request the Kubernetes API refuses is a status and a Warning Event, re-checked, never a silent retry.

The emulated API answers the Pod create or the Secret read the way admission (Pod Security, ResourceQuota,
an invalid field) or RBAC answers it; the SessionMemory must say so, and start once the cause is gone.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import kmock as km
import pytest
from smem_harness import FAST, Cluster, eventually, run_operator, smem_body
from test_lifecycle import SECRET_VALUE, cond, phase_is, with_secret

from memsync.controller import waits
from memsync.controller.kube import KubeApiError, is_missing_service_account, is_refusal, refusal_message
from memsync.controller.sessionmemory.pod import pod_name_for

POD_SECURITY = (
    'pods "s1-sandbox" is forbidden: violates PodSecurity "restricted:latest": seLinuxOptions '
    '(container "sandbox" set forbidden securityContext.seLinuxOptions: type "spc_t")'
)
QUOTA = (
    'pods "s1-sandbox" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=4, '
    "limited: pods=4"
)
NO_SERVICE_ACCOUNT = (
    'pods "s1-sandbox" is forbidden: error looking up service account agents/default: '
    'serviceaccount "default" not found'
)
NO_NAMED_SERVICE_ACCOUNT = (
    'pods "s1-sandbox" is forbidden: error looking up service account agents/agent-runner: '
    'serviceaccount "agent-runner" not found'
)
RBAC = (
    'secrets "work-secret" is forbidden: User "system:serviceaccount:memsync-system:memsync-operator" '
    'cannot get resource "secrets" in API group "" in the namespace "agents"'
)


def forbidden(message: str) -> km.KubernetesError:
    return km.KubernetesError(status=403, reason="Forbidden", message=message)


def emulator(cluster: Cluster) -> Any:
    return cluster.kmock


async def test_a_refused_pod_create_fails_the_session_then_starts_once_allowed(cluster: Cluster) -> None:
    """Pod Security refuses the Pod: a verdict on the session (a quota's refusal is a wait instead:
    test_waits.py)."""
    fragment = 'violates PodSecurity "restricted:latest"'
    await with_secret(cluster)
    emulator(cluster).reject_pod_creates = forbidden(POD_SECURITY)
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        ready = cond(status, "Ready")
        assert ready["status"] == "False" and ready["reason"] == "PodRejected"
        assert fragment in ready["message"] and "403 Forbidden" in ready["message"]
        assert status["message"] == ready["message"]
        assert "podName" not in status and cluster.pods() == []
        assert status["storeCount"] == 2  # the Stores column (kept by the API: the schema declares it)
        warning = await eventually(
            lambda: next((e for e in cluster.events("s1") if e["reason"] == "PodRejected"), None),
            what="a PodRejected event",
        )
        assert warning["type"] == "Warning" and fragment in warning["message"]

        # The namespace's policy or quota changes: the periodic re-check creates the Pod.
        emulator(cluster).reject_pod_creates = None
        status = await eventually(phase_is(cluster, "s1", "Pending"), what="Pending once allowed")
        assert status["podName"] == pod_name_for("s1")
        assert cluster.pod_ever_created(pod_name_for("s1")) == 1


async def test_an_invalid_field_is_rejected_without_echoing_the_value(cluster: Cluster) -> None:
    await with_secret(cluster)
    emulator(cluster).reject_pod_creates = km.KubernetesError(
        status=422,
        reason="Invalid",
        message=(
            'Pod "s1-sandbox" is invalid: spec.containers[0].env[0].name: Invalid value: '
            f'"{SECRET_VALUE}": a valid environment variable name must consist of alphabetic characters'
        ),
    )
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        ready = cond(status, "Ready")
        assert ready["reason"] == "PodRejected"
        assert "spec.containers[0].env[0].name: Invalid value: (value hidden)" in ready["message"]
        await eventually(lambda: "PodRejected" in cluster.event_reasons("s1"), what="a PodRejected event")
        assert SECRET_VALUE not in json.dumps(status)
        assert SECRET_VALUE not in json.dumps(cluster.events("s1"))


async def test_a_forbidden_secret_read_is_refused_then_rechecked(cluster: Cluster) -> None:
    await with_secret(cluster)
    emulator(cluster).reject_secret_reads = forbidden(RBAC)
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        ready = cond(status, "Ready")
        assert ready["reason"] == "SecretForbidden"
        assert 'cannot get resource "secrets"' in ready["message"] and "work-secret" in ready["message"]
        assert cond(status, "Flushed")["reason"] == "NothingToFlush"
        assert cluster.pods() == []
        await eventually(lambda: "SecretForbidden" in cluster.event_reasons("s1"), what="an event")

        emulator(cluster).reject_secret_reads = None  # the RoleBinding is applied
        await eventually(phase_is(cluster, "s1", "Pending"), what="Pending once readable")


async def test_a_missing_default_service_account_is_waited_for_not_failed(cluster: Cluster) -> None:
    await with_secret(cluster)
    emulator(cluster).reject_pod_creates = forbidden(NO_SERVICE_ACCOUNT)
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        # Refused twice: kopf retried the create, and meanwhile the status says nothing is wrong.
        await eventually(lambda: emulator(cluster).rejected >= 2, timeout=30, what="a retried create")
        assert cluster.smem_status("s1").get("phase") != "Failed"
        # The serviceaccount controller creates `default` a moment after the namespace.
        emulator(cluster).reject_pod_creates = None
        status = await eventually(phase_is(cluster, "s1", "Pending"), timeout=30, what="Pending")
        assert status["podName"] == pod_name_for("s1")
        assert "PodRejected" not in cluster.event_reasons("s1")


async def test_a_service_account_that_never_appears_is_refused_after_the_wait(cluster: Cluster) -> None:
    """A serviceAccountName nobody creates: retried for service_account_wait, then ServiceAccountNotFound
    (a status and a Warning Event); re-checked, so the session starts once the ServiceAccount exists."""
    await with_secret(cluster)
    emulator(cluster).reject_pod_creates = forbidden(NO_NAMED_SERVICE_ACCOUNT)
    body = smem_body("s1")
    body["spec"]["template"]["spec"]["serviceAccountName"] = "agent-runner"
    async with run_operator(cluster, dataclasses.replace(FAST, service_account_wait=2.0)):
        await cluster.create_smem(body)
        status = await eventually(phase_is(cluster, "s1", "Failed"), timeout=60, what="Failed")
        assert emulator(cluster).rejected >= 2, "the create was retried during the wait"
        ready = cond(status, "Ready")
        assert ready["status"] == "False" and ready["reason"] == "ServiceAccountNotFound"
        assert "ServiceAccount agent-runner (spec.template.spec.serviceAccountName)" in ready["message"]
        assert "does not exist in namespace" in ready["message"]
        assert "podName" not in status and cluster.pods() == []
        warning = await eventually(
            lambda: next((e for e in cluster.events("s1") if e["reason"] == "ServiceAccountNotFound"), None),
            what="a ServiceAccountNotFound event",
        )
        assert warning["type"] == "Warning" and "agent-runner" in warning["message"]

        emulator(cluster).reject_pod_creates = None  # the ServiceAccount is created
        status = await eventually(
            phase_is(cluster, "s1", "Pending"), timeout=30, what="Pending once it exists"
        )
        assert status["podName"] == pod_name_for("s1")


@pytest.mark.parametrize(
    ("first_seen", "now", "over"), [(100.0, 100.0, False), (100.0, 159.9, False), (100.0, 160.0, True)]
)
def test_the_service_account_wait_is_bounded(first_seen: float, now: float, over: bool) -> None:
    assert waits.wait_is_over(first_seen, now, 60.0) is over


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({}, "default"),
        ({"template": {"spec": {"containers": []}}}, "default"),
        ({"template": {"spec": {"serviceAccountName": ""}}}, "default"),
        ({"template": {"spec": {"serviceAccountName": "runner"}}}, "runner"),
    ],
)
def test_the_service_account_a_pod_asks_for(spec: dict[str, Any], named: str) -> None:
    assert waits.service_account_of(spec) == named


def test_the_missing_service_account_message_names_the_field() -> None:
    assert "(spec.template.spec.serviceAccountName)" in waits.missing_service_account_message("r", "ns", 60)
    assert "(the namespace's default ServiceAccount)" in waits.missing_service_account_message(
        "default", "ns", 60
    )
    assert is_missing_service_account(_error(403, NO_NAMED_SERVICE_ACCOUNT))
    assert not is_missing_service_account(_error(403, QUOTA))


def _error(status: int, message: str = "m", reason: str = "R") -> KubeApiError:
    return KubeApiError(status, reason, message)


@pytest.mark.parametrize(
    ("status", "message", "refused"),
    [
        (400, "bad request", True),
        (403, POD_SECURITY, True),
        (403, QUOTA, True),
        (403, 'pods "p" is forbidden: maximum cpu usage per Container is 2, but limit is 4', True),
        (403, RBAC, True),
        (413, "request entity too large", True),
        (422, 'Pod "p" is invalid: spec.containers[0].ports[0].hostPort: Invalid value: 80', True),
        (403, NO_SERVICE_ACCOUNT, False),
        (401, "Unauthorized", False),
        (404, 'namespaces "agents" not found', False),
        (408, "timeout", False),
        (409, "conflict", False),
        (429, "too many requests", False),
        (500, "etcdserver: request timed out", False),
        (503, "unavailable", False),
    ],
)
def test_which_api_answers_are_refusals(status: int, message: str, refused: bool) -> None:
    assert is_refusal(_error(status, message)) is refused


def test_refusal_message_hides_echoed_values_even_when_cut() -> None:
    text = refusal_message(
        _error(
            422,
            'spec.containers[0].env[1].value: Invalid value: "hunter2 with spaces": bad; '
            "spec.containers[0].ports[0].hostPort: Invalid value: 8080: hostPort forbidden; "
            'spec.x: Unsupported value: "top secret',
            "Invalid",
        )
    )
    assert "hunter2" not in text and "8080" not in text and "top secret" not in text
    assert text.startswith("422 Invalid: spec.containers[0].env[1].value: Invalid value: (value hidden): bad")
