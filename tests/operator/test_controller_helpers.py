"""The controller's pure helpers and its kopf settings."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, cast

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from memsync.controller import conditions, periodic
from memsync.controller.kube import (
    KubeAlreadyExists,
    KubeApi,
    KubeApiError,
    KubeConflict,
    KubeNotFound,
    _error,
)
from memsync.controller.objects import meta_of
from memsync.controller.sessionmemory import derive, ownership
from memsync.controller.sessionmemory import digest as sm_digest
from memsync.controller.sessionmemory import finalize as sm_finalize
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory import state as sm_state
from memsync.controller.sessionmemory import writer as sm_writer
from memsync.controller.sessionmemory.health import health_url
from memsync.controller.settings import (
    KOPF_REQUESTS,
    POD_SELECTOR,
    ControllerConfig,
    WatchTimeouts,
    bounded_session,
    configure_settings,
)
from memsync.crd.models import (
    ANNOTATION_PREFIX,
    API_VERSION,
    FINALIZER,
    KIND,
    sandbox_template,
    validate_spec,
)
from memsync.crd.spec_messages import plain


def smem(name: str, session: str, created: str, uid: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name}", "creationTimestamp": created},
        "spec": {"sessionId": session},
    }


_NOW = datetime(2026, 1, 1, tzinfo=UTC)


def owned_pod(
    uid: str = "u1", *, controller: bool = True, kind: str = KIND, api: str = API_VERSION
) -> dict[str, Any]:
    ref = {"apiVersion": api, "kind": kind, "name": "s1", "uid": uid, "controller": controller}
    return {"metadata": {"name": "s1-sandbox", "ownerReferences": [ref]}}


def test_owner_reference_must_be_our_controller() -> None:
    assert ownership.owner_uid(owned_pod()) == "u1"
    assert ownership.owner_name(owned_pod()) == "s1"
    assert ownership.owner_uid(owned_pod(controller=False)) is None
    assert ownership.owner_uid(owned_pod(kind="ReplicaSet")) is None
    assert ownership.owner_uid(owned_pod(api="other.example.com/v1")) is None
    assert ownership.owner_uid({"metadata": {}}) is None
    assert ownership.owner_uid({}) is None


def test_the_oldest_session_memory_holds_the_session() -> None:
    a = smem("a", "sesn_x", "2026-01-01T00:00:00Z")
    b = smem("b", "sesn_x", "2026-01-01T00:00:05Z")
    c = smem("c", "sesn_x", "2026-01-01T00:00:05Z")
    other = smem("z", "sesn_y", "2025-01-01T00:00:00Z")
    everyone = [c, other, b, a]
    assert ownership.senior_duplicate(a, everyone) is None
    assert ownership.senior_duplicate(b, everyone) == a
    assert ownership.senior_duplicate(c, [b, c]) == b  # same second: ordered by name
    assert ownership.senior_duplicate(b, [other]) is None  # the list may not include "me" yet
    assert ownership.senior_duplicate(smem("n", "", "x"), everyone) is None


def test_the_sessions_index_keeps_a_small_claim_per_session() -> None:
    a = smem("a", "sesn_x", "2026-01-01T00:00:00Z")
    a["metadata"] |= {"namespace": "ns", "annotations": {"big": "x" * 10_000}, "managedFields": [{}]}
    a["spec"] |= {"stores": [{"memoryStoreId": "memstore_1", "name": "notes"}]}
    claim = {
        "metadata": {
            "name": "a",
            "namespace": "ns",
            "uid": "uid-a",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"sessionId": "sesn_x"},
    }
    assert ownership.session_claim(a) == {("ns", "sesn_x"): claim}
    b = smem("b", "sesn_x", "2026-01-01T00:00:05Z")
    b["metadata"]["namespace"] = "ns"
    # The claims in the index decide as the whole objects would.
    [b_claim] = (ownership.session_claim(b) or {}).values()
    assert ownership.senior_duplicate(b, [claim, b_claim]) == claim
    assert ownership.senior_duplicate(a, [claim, b_claim]) is None
    assert ownership.session_claim(smem("n", "", "x")) is None
    assert ownership.session_claim({"metadata": {"name": "x"}, "spec": {"sessionId": "sesn_y"}}) is None


def test_a_remembered_pod_keeps_what_the_status_health_and_deletion_read() -> None:
    running = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    pod = {
        "metadata": {
            "name": "s1-sandbox",
            "namespace": "ns",
            "uid": "pu",
            "resourceVersion": "7",
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND, "uid": "su", "controller": True}],
            "deletionTimestamp": "2026-01-01T00:00:01Z",
            "deletionGracePeriodSeconds": 30,
            "managedFields": [{"manager": "kubelet"}],
            "annotations": {"a": "b"},
            "labels": {"l": "v"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 45,
            "initContainers": [
                {"name": "memsync-mount", "image": "i", "env": [{"name": "E", "value": "v"}]},
                {"name": "memsync-sync", "image": "i", "ports": [{"name": "metrics", "containerPort": 9}]},
            ],
            "containers": [{"name": "sandbox", "image": "big"}],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.2",
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "x": 1},
            ],
            "initContainerStatuses": [
                {"name": "memsync-sync", "ready": True, "state": running, "image": "i", "imageID": "x"}
            ],
            "containerStatuses": [{"name": "sandbox", "ready": False, "state": running, "lastState": {}}],
        },
    }
    digest = sm_digest.pod_digest(pod)
    assert digest == {
        "metadata": {
            k: v for k, v in pod["metadata"].items() if k not in ("managedFields", "annotations", "labels")
        },
        "spec": {
            "terminationGracePeriodSeconds": 45,
            "initContainers": [{"name": "memsync-sync", "ports": [{"name": "metrics", "containerPort": 9}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.2",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
            "initContainerStatuses": [{"name": "memsync-sync", "ready": True, "state": running}],
            "containerStatuses": [{"name": "sandbox", "ready": False, "state": running}],
        },
    }
    # What the controller derives from the Pod is the same from its digest.
    assert derive.derive_status(None, digest, stores={}, generation=1, now=_NOW) == derive.derive_status(
        None, pod, stores={}, generation=1, now=_NOW
    )
    assert health_url(digest) == health_url(pod) == "http://10.0.0.2:9/status"
    assert ownership.owner_uid(digest) == "su" and sm_finalize.grace_seconds(digest, 1.0) == 30.0
    assert "managedFields" in pod["metadata"]  # the original is left alone


def test_a_remembered_sessionmemory_is_its_identity_and_status_with_paths_of_its_generation() -> None:
    spec = {
        "sessionId": "sesn_1",
        "workItemSecretRef": {"name": "w", "key": "k"},
        "stores": [{"memoryStoreId": "memstore_a", "name": "User Preferences"}],
        "template": sandbox_template({"image": "i"}),
    }
    meta = {"name": "s1", "namespace": "ns", "uid": "u1", "generation": 2, "resourceVersion": "9"}
    obj = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {**meta, "creationTimestamp": "t", "managedFields": [{}], "annotations": {"a": "b"}},
        "spec": spec,
        "status": {"phase": "Pending"},
    }
    runtime = sm_state.SessionMemories(kube=cast(Any, None), config=ControllerConfig(agent_image="i"))
    runtime.remember("ns", "s1", obj)
    known = runtime.known("ns", "s1", "u1")
    assert known == {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {**meta, "creationTimestamp": "t"},
        "status": {"phase": "Pending"},
    }
    paths = {"memstore_a": "/mnt/memory/user-preferences"}
    assert runtime.store_paths(known) == sm_digest.store_paths(spec) == paths
    assert runtime.known("ns", "s1", "another-uid") is None
    runtime._paths["u1"] = (1, {})  # paths of another generation: the digest cannot be used
    assert runtime.known("ns", "s1", None) is None


def test_store_paths_from_a_valid_and_an_invalid_spec() -> None:
    spec = {
        "sessionId": "sesn_1",
        "workItemSecretRef": {"name": "w", "key": "k"},
        "stores": [
            {"memoryStoreId": "memstore_a", "name": "User Preferences"},
            {"memoryStoreId": "memstore_b", "name": "x", "mountPath": "/mnt/memory/custom"},
        ],
        "template": sandbox_template({"image": "i"}),
    }
    assert sm_digest.store_paths(spec) == {
        "memstore_a": "/mnt/memory/user-preferences",
        "memstore_b": "/mnt/memory/custom",
    }
    broken = {"stores": [{"memoryStoreId": "memstore_a"}, {"name": "no id"}, "junk"]}
    assert sm_digest.store_paths(broken) == {"memstore_a": None}
    assert sm_digest.store_paths({}) == {}


def _status(phase: str, reason: str) -> dict[str, Any]:
    return {
        "phase": phase,
        "message": f"{phase} because {reason}",
        "conditions": [{"type": "Ready", "reason": reason}],
    }


def test_announcements_follow_phase_changes_and_failure_reasons() -> None:
    assert sm_writer.announcement({}, _status("Pending", "PodPending")) == (
        "Normal",
        "Pending",
        "Pending because PodPending",
    )
    assert sm_writer.announcement(_status("Pending", "PodPending"), _status("Pending", "PodPending")) is None
    assert (
        sm_writer.announcement(_status("Running", "SessionRunning"), _status("Running", "SyncNotReady"))
        is None
    )
    assert sm_writer.announcement(_status("Running", "x"), _status("Failed", "MountFailed"))[:2] == (
        "Warning",
        "MountFailed",
    )  # type: ignore[index]
    assert (
        sm_writer.announcement(_status("Failed", "SecretNotFound"), _status("Failed", "SecretKeyNotFound"))[1]
        == "SecretKeyNotFound"
    )  # type: ignore[index]
    assert (
        sm_writer.announcement(_status("Failed", "SecretNotFound"), _status("Failed", "SecretNotFound"))
        is None
    )
    assert sm_writer.announcement(_status("Flushing", "x"), _status("Succeeded", "SessionSucceeded"))[:2] == (
        "Normal",
        "Succeeded",
    )  # type: ignore[index]


def test_grace_seconds() -> None:
    assert (
        sm_finalize.grace_seconds(
            {"metadata": {"deletionGracePeriodSeconds": 5}, "spec": {"terminationGracePeriodSeconds": 100}}, 1
        )
        == 5
    )
    assert sm_finalize.grace_seconds({"spec": {"terminationGracePeriodSeconds": 100}}, 1) == 100
    assert sm_finalize.grace_seconds({"spec": {"terminationGracePeriodSeconds": True}}, 7) == 7
    assert sm_finalize.grace_seconds({}, 7) == 7


def test_plain_copies_mapping_views() -> None:
    body = kopf.Body({"metadata": {"name": "x"}, "spec": {"stores": [{"a": 1}]}})
    copy = plain(body)
    assert copy == {"metadata": {"name": "x"}, "spec": {"stores": [{"a": 1}]}}
    assert type(copy) is dict and type(copy["spec"]["stores"]) is list


def test_kopf_settings() -> None:
    settings = configure_settings(
        kopf.OperatorSettings(), timeouts=WatchTimeouts(server_timeout=111), reporting_instance="pod-1"
    )
    assert settings.persistence.finalizer == FINALIZER == "agents.memsync.dev/finalizer"
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert settings.persistence.progress_storage.prefix == ANNOTATION_PREFIX
    assert isinstance(settings.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert settings.persistence.diffbase_storage.prefix == ANNOTATION_PREFIX
    assert settings.watching.server_timeout == 111
    assert settings.watching.client_timeout is not None and settings.watching.client_timeout > 111 - 1
    assert settings.watching.inactivity_timeout > 0
    assert list(settings.watching.label_selectors.values()) == [POD_SELECTOR]
    assert POD_SELECTOR == "app.kubernetes.io/managed-by=memsync"
    assert settings.posting.level == logging.INFO
    # kopf sends server_timeout as the watch's timeoutSeconds, which a real API server parses as an integer.
    default = configure_settings(kopf.OperatorSettings()).watching.server_timeout
    assert type(default) is int and default == 300
    assert settings.posting.reporting_instance == "pod-1"
    # No CRD or Namespace watches (so no RBAC on them) unless namespace globs must be matched.
    assert settings.scanning.disabled is True
    assert configure_settings(kopf.OperatorSettings(), namespace_patterns=True).scanning.disabled is False


def test_api_errors_are_classified_without_request_bodies() -> None:
    def exc(status: int, reason: str, message: str = "m") -> ApiException:
        e = ApiException(status=status, reason="HTTP reason")
        e.body = json.dumps({"kind": "Status", "reason": reason, "message": message})
        return e

    assert isinstance(_error(exc(404, "NotFound")), KubeNotFound)
    assert isinstance(_error(exc(409, "AlreadyExists")), KubeAlreadyExists)
    assert isinstance(_error(exc(409, "Conflict")), KubeConflict)
    other = _error(exc(500, "InternalError", "x" * 2000))
    assert type(other) is KubeApiError and other.status == 500 and len(other.message) == 500
    plain = ApiException(status=503, reason="Service Unavailable")
    plain.body = "<html>"
    assert str(_error(plain)) == "503 Service Unavailable: Service Unavailable"


def test_connection_info_carries_the_clients_credentials() -> None:
    api = KubeApi.for_host("https://k8s.example:6443/", token="t0ken")
    try:
        info = api.connection_info()
        assert (info.server, info.scheme, info.token, info.insecure) == (
            "https://k8s.example:6443",
            "Bearer",
            "t0ken",
            False,
        )
    finally:
        api.close()


@pytest.mark.parametrize("reason", sorted(ph.REFUSAL_REASONS))
def test_refusal_reasons_are_recognised(reason: str) -> None:
    status = derive.refusal_status(
        None, reason=reason, message="m", stores={}, generation=1, now=conditions.now_utc()
    )
    assert ph.is_refusal(status)


def test_what_the_periodic_recheck_covers() -> None:
    refused = derive.refusal_status(
        None, reason=ph.SECRET_NOT_FOUND, message="m", stores={}, generation=1, now=conditions.now_utc()
    )
    assert periodic.needs_recheck(refused)
    for phase in ("Pending", "Mounting", "Running", "Flushing"):
        assert periodic.needs_recheck({"phase": phase, "podName": "s1-sandbox"}), phase
    for phase in ("Succeeded", "Failed"):
        assert not periodic.needs_recheck({"phase": phase, "podName": "s1-sandbox"}), phase
    assert not periodic.needs_recheck({})  # nothing created yet: the create handler owns it


def test_metadata_view_reads_typed_fields_and_tolerates_absence() -> None:
    obj = {
        "metadata": {
            "name": "s1",
            "namespace": "agents",
            "uid": "u1",
            "generation": 4,
            "resourceVersion": "17",
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "ownerReferences": [{"uid": "o1"}, "not a mapping"],
            "labels": {"a": "b"},
        }
    }
    meta = meta_of(obj)
    assert (meta.name, meta.namespace, meta.uid, meta.generation) == ("s1", "agents", "u1", 4)
    assert (meta.resource_version, meta.deletion_timestamp) == ("17", "2026-01-01T00:00:00Z")
    assert meta.owner_references == ({"uid": "o1"},)
    assert meta.reference() == {"name": "s1", "namespace": "agents", "uid": "u1"}
    for empty in ({}, {"metadata": None}, {"metadata": {"generation": True, "uid": 7}}):
        view = meta_of(empty)
        assert (view.name, view.uid, view.generation, view.owner_references) == (None, None, None, ())


def test_paths_of_a_validated_spec_equal_store_paths() -> None:
    raw = {
        "sessionId": "sesn_x",
        "workItemSecretRef": {"name": "w", "key": "k"},
        "stores": [{"memoryStoreId": "memstore_a", "name": "Team Notes"}],
        "template": sandbox_template({"image": "busybox"}),
    }
    paths = {"memstore_a": "/mnt/memory/team-notes"}
    assert sm_digest.paths_of(validate_spec(raw), raw) == sm_digest.store_paths(raw) == paths
    assert sm_digest.paths_of(None, raw) == {"memstore_a": None}


async def test_kopf_session_bounds_its_requests_and_keeps_the_credentials() -> None:
    info = kopf.ConnectionInfo(server="https://127.0.0.1:6443", scheme="Bearer", token="t0ken", insecure=True)
    bounded = bounded_session(info, watches=4)
    try:
        assert bounded.server == info.server
        connector = bounded.aiohttp_session.connector
        assert connector is not None and connector.limit == KOPF_REQUESTS + 4
        assert bounded.aiohttp_session.headers["Authorization"] == "Bearer t0ken"
    finally:
        await bounded.aiohttp_session.close()
