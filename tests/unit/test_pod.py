"""The sandbox Pod builder: field-by-field against the expected Pod, restricted PSS, secrets, grace period."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import kubernetes_validate
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_crd import base_spec
from test_manifests import K8S_VERSION

from memsync.controller.sessionmemory.pod import (
    ANNOTATION_SPEC_HASH,
    GRACE_MARGIN_SECONDS,
    SANDBOX_SHUTDOWN_SECONDS,
    PodSettings,
    attempt_of_pod,
    build_sandbox_pod,
    grace_period_seconds,
    owner_label_value,
    pod_name_for,
    spec_hash,
    with_ephemeral_storage,
)
from memsync.crd.models import (
    API_VERSION,
    LABEL_ATTEMPT,
    SandboxPodSpec,
    SandboxTemplate,
    SessionMemorySpec,
)
from support.pod_security import restricted_violations

IMAGE = "memsync:0.1.0"
UID = "5f1b7c2e-0d7a-4c53-9b1e-3f1f0b1d2a11"

#: The design's minimal SessionMemory spec (the same one the CRD tests start from).
MINIMAL_SPEC: dict[str, Any] = base_spec()

#: The template's scheduling fields, copied into the Pod as they are.
SCHEDULING: dict[str, Any] = {
    "runtimeClassName": "gvisor",
    "nodeSelector": {"pool": "sandboxes"},
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"team": "research"}},
                    },
                }
            ]
        }
    },
    "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
    "serviceAccountName": "agent",
    "imagePullSecrets": [{"name": "registry"}],
    "priorityClassName": "agents",
    "activeDeadlineSeconds": 7200,
}

SANDBOX: dict[str, Any] = {
    "name": "sandbox",
    "image": "example.com/agent-sandbox:2.0",
    "imagePullPolicy": "Always",
    "command": ["/bin/agent"],
    "args": ["--memory", "/mnt/memory"],
    "workingDir": "/work",
    "env": [
        {"name": "MODE", "value": "demo"},
        {"name": "ANTHROPIC_API_KEY", "valueFrom": {"secretKeyRef": {"name": "agent-key", "key": "key"}}},
    ],
    "ports": [{"name": "http", "containerPort": 8080}],
    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    "securityContext": {
        "runAsGroup": 1000,
        "readOnlyRootFilesystem": True,
        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["NET_RAW"]},
    },
    "lifecycle": {"preStop": {"exec": {"command": ["/bin/agent", "save"]}}},
    "volumeMounts": [{"name": "work", "mountPath": "/work"}],
}

FULL_SPEC: dict[str, Any] = {
    "sessionId": "sesn_011full",
    "workItemSecretRef": {"name": "work-full", "key": "payload"},
    "apiBaseUrl": "http://memsync-store.memsync-system.svc:8080",
    "stores": [
        {"memoryStoreId": "memstore_01aa", "name": "User Preferences", "access": "read_write"},
        {"memoryStoreId": "memstore_01bb", "name": "Team Runbooks", "access": "read_only"},
        {"memoryStoreId": "memstore_01cc", "name": "Scratch", "mountPath": "/mnt/memory/scratch/v2"},
    ],
    "sync": {"intervalSeconds": 60, "deletions": "log_only", "finalFlushSeconds": 45},
    "template": {
        "metadata": {"labels": {"team": "research"}, "annotations": {"example.com/ticket": "T-1"}},
        "spec": {
            "containers": [SANDBOX],
            "volumes": [{"name": "work", "emptyDir": {"sizeLimit": "1Gi"}}],
            **SCHEDULING,
        },
    },
}


RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}
MEMSYNC_SC = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
}
#: The memsync containers' resources: the defaults, and ephemeral storage (the stores' folder's size
#: requested, a limit of 2Gi).
STORAGE_RESOURCES = {
    "requests": {**RESOURCES["requests"], "ephemeral-storage": "1Gi"},
    "limits": {**RESOURCES["limits"], "ephemeral-storage": "2Gi"},
}
MEMSYNC_MOUNTS = [
    {"name": "memory", "mountPath": "/mnt/memory"},
    {"name": "memsync-state", "mountPath": "/var/lib/memsync"},
]


def expected_env(
    *,
    session: str,
    stores: list[dict[str, str]],
    interval: str,
    deletions: str,
    flush: str,
    url: str,
    secret: Any,
) -> list[dict[str, Any]]:
    return [
        {"name": "MEMSYNC_SESSION_ID", "value": session},
        {"name": "MEMSYNC_STORES", "value": json.dumps(stores, separators=(",", ":"))},
        {"name": "MEMSYNC_SYNC_INTERVAL", "value": interval},
        {"name": "MEMSYNC_SYNC_DELETIONS", "value": deletions},
        {"name": "MEMSYNC_FLUSH_TIMEOUT", "value": flush},
        {"name": "MEMSYNC_STATE_DIR", "value": "/var/lib/memsync"},
        {"name": "MEMSYNC_TERMINATION_LOG", "value": "/dev/termination-log"},
        {"name": "MEMSYNC_LOG_FORMAT", "value": "json"},
        {"name": "ANTHROPIC_BASE_URL", "value": url},
        {"name": "ANTHROPIC_WORK_SECRET", "valueFrom": {"secretKeyRef": {**secret, "optional": False}}},
    ]


def expected_pod(
    *,
    name: str,
    session: str,
    env: list[dict[str, Any]],
    sandbox: dict[str, Any],
    grace: int,
    pull: str,
    spec: dict[str, Any],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    scheduling: dict[str, Any] | None = None,
) -> dict[str, Any]:
    def memsync(container: str, command: list[str]) -> dict[str, Any]:
        return {
            "name": container,
            "image": IMAGE,
            "imagePullPolicy": pull,
            "command": command,
            "env": copy.deepcopy(env),
            "volumeMounts": MEMSYNC_MOUNTS,
            "resources": STORAGE_RESOURCES,
            "securityContext": MEMSYNC_SC,
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }

    sync = memsync("memsync-sync", ["memsync", "sync"])
    sync["env"].append({"name": "MEMSYNC_METRICS_PORT", "value": "9477"})
    sync.update(
        {
            "restartPolicy": "Always",
            "ports": [{"name": "metrics", "containerPort": 9477, "protocol": "TCP"}],
            "startupProbe": {
                "httpGet": {"path": "/readyz", "port": 9477},
                "periodSeconds": 2,
                "timeoutSeconds": 3,
                "failureThreshold": 90,
            },
            "readinessProbe": {
                "httpGet": {"path": "/readyz", "port": 9477},
                "periodSeconds": 5,
                "timeoutSeconds": 3,
                "failureThreshold": 3,
            },
            "lifecycle": {"preStop": {"exec": {"command": ["memsync", "flush"]}}},
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-sandbox",
            "namespace": "agents",
            "labels": {
                **(labels or {}),
                "app.kubernetes.io/name": "memsync-sandbox",
                "app.kubernetes.io/component": "sandbox",
                "app.kubernetes.io/managed-by": "memsync",
                "agents.memsync.dev/session-id": session,
                "agents.memsync.dev/sessionmemory": name,
                "agents.memsync.dev/attempt": "0",
            },
            "annotations": {
                **(annotations or {}),
                "kubectl.kubernetes.io/default-container": "sandbox",
                "agents.memsync.dev/spec-hash": spec_hash(SessionMemorySpec.model_validate(spec)),
            },
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "SessionMemory",
                    "name": name,
                    "uid": UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            **(scheduling or {}),
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "fsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "volumes": [
                {"name": "memory", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "memsync-state", "emptyDir": {}},
                *(volumes or []),
            ],
            "initContainers": [memsync("memsync-mount", ["memsync", "mount"]), sync],
            "containers": [sandbox],
        },
    }


def build(spec: dict[str, Any], name: str = "sesn-011abc", **kw: Any) -> dict[str, Any]:
    return build_sandbox_pod(
        name=name,
        namespace="agents",
        uid=UID,
        spec=SessionMemorySpec.model_validate(spec),
        agent_image=IMAGE,
        **kw,
    )


def assert_same(actual: Any, expected: Any, path: str = "pod") -> None:
    """Compare field by field, so a failure names the first differing field path."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        assert set(actual) == set(expected), f"{path}: keys differ: {set(actual) ^ set(expected)}"
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list) and isinstance(actual, list):
        assert len(actual) == len(expected), f"{path}: {len(actual)} items, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{path}[{i}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"


def test_minimal_pod_field_by_field() -> None:
    env = expected_env(
        session="sesn_011abc",
        stores=[
            {
                "memory_store_id": "memstore_01aa",
                "name": "User Preferences",
                "mount_path": "/mnt/memory/user-preferences",
                "access": "read_write",
            }
        ],
        interval="15",
        deletions="enabled",
        flush="30",
        url="https://api.anthropic.com",
        secret={"name": "work-sesn-011abc", "key": "secret"},
    )
    sandbox = {
        "name": "sandbox",
        "image": "example.com/agent-sandbox:1.0",
        "volumeMounts": [{"name": "memory", "mountPath": "/mnt/memory"}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    expected = expected_pod(
        name="sesn-011abc",
        session="sesn_011abc",
        env=env,
        sandbox=sandbox,
        grace=100,
        pull="IfNotPresent",
        spec=MINIMAL_SPEC,
    )
    assert_same(build(MINIMAL_SPEC), expected)


def test_full_pod_field_by_field() -> None:
    env = expected_env(
        session="sesn_011full",
        stores=[
            {
                "memory_store_id": "memstore_01aa",
                "name": "User Preferences",
                "mount_path": "/mnt/memory/user-preferences",
                "access": "read_write",
            },
            {
                "memory_store_id": "memstore_01bb",
                "name": "Team Runbooks",
                "mount_path": "/mnt/memory/team-runbooks",
                "access": "read_only",
            },
            {
                "memory_store_id": "memstore_01cc",
                "name": "Scratch",
                "mount_path": "/mnt/memory/scratch/v2",
                "access": "read_write",
            },
        ],
        interval="60",
        deletions="log_only",
        flush="45",
        url="http://memsync-store.memsync-system.svc:8080",
        secret={"name": "work-full", "key": "payload"},
    )
    user = SANDBOX
    sandbox = {
        "name": "sandbox",
        "image": "example.com/agent-sandbox:2.0",
        "imagePullPolicy": "Always",
        "command": ["/bin/agent"],
        "args": ["--memory", "/mnt/memory"],
        "workingDir": "/work",
        "env": user["env"],
        "ports": user["ports"],
        "resources": user["resources"],
        "lifecycle": user["lifecycle"],
        # memsync's own mount first, then the template's
        "volumeMounts": [
            {"name": "memory", "mountPath": "/mnt/memory"},
            {"name": "work", "mountPath": "/work"},
        ],
        "securityContext": {
            "runAsGroup": 1000,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "runAsNonRoot": True,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL", "NET_RAW"]},
        },
    }
    # grace: max(30, 45) + 2 * 45 + 10
    expected = expected_pod(
        name="smem-full",
        session="sesn_011full",
        env=env,
        sandbox=sandbox,
        grace=145,
        spec=FULL_SPEC,
        pull="Always",
        labels={"team": "research"},
        annotations={"example.com/ticket": "T-1"},
        volumes=[{"name": "work", "emptyDir": {"sizeLimit": "1Gi"}}],
        scheduling=SCHEDULING,
    )
    assert_same(
        build(FULL_SPEC, name="smem-full", settings=PodSettings(agent_image_pull_policy="Always")), expected
    )


def test_the_pod_is_a_valid_kubernetes_pod() -> None:
    for spec in (MINIMAL_SPEC, FULL_SPEC):
        kubernetes_validate.validate(build(spec), K8S_VERSION, strict=True)


def test_builder_is_pure_and_does_not_alias_the_spec() -> None:
    spec = SessionMemorySpec.model_validate(FULL_SPEC)
    before = copy.deepcopy(spec.template)
    first = build_sandbox_pod(name="a", namespace="n", uid=UID, spec=spec, agent_image=IMAGE)
    first["spec"]["containers"][0]["env"].append({"name": "X", "value": "y"})
    first["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"].append("CHOWN")
    second = build_sandbox_pod(name="a", namespace="n", uid=UID, spec=spec, agent_image=IMAGE)
    assert spec.template == before
    assert second != first
    assert second == build_sandbox_pod(name="a", namespace="n", uid=UID, spec=spec, agent_image=IMAGE)


# --- restricted Pod Security Standard -----------------------------------------------------------------------


@pytest.mark.parametrize("spec", [MINIMAL_SPEC, FULL_SPEC], ids=["minimal", "full"])
def test_pod_meets_the_restricted_standard(spec: dict[str, Any]) -> None:
    pod = build(spec)
    assert restricted_violations(pod) == []
    every = pod["spec"]["initContainers"] + pod["spec"]["containers"]
    assert [c["name"] for c in every] == ["memsync-mount", "memsync-sync", "sandbox"]
    for container in every:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"][0] == "ALL"
        assert sc["runAsNonRoot"] is True
    for container in pod["spec"]["initContainers"]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


BREAKERS: list[tuple[str, Any]] = [
    ("privileged", lambda p: p["spec"]["containers"][0]["securityContext"].update(privileged=True)),
    (
        "escalation",
        lambda p: p["spec"]["initContainers"][1]["securityContext"].pop("allowPrivilegeEscalation"),
    ),
    (
        "caps-drop",
        lambda p: p["spec"]["initContainers"][0]["securityContext"]["capabilities"].update(drop=[]),
    ),
    (
        "caps-add",
        lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
    ),
    ("root-pod", lambda p: p["spec"]["securityContext"].update(runAsUser=0)),
    ("root-container", lambda p: p["spec"]["containers"][0]["securityContext"].update(runAsUser=0)),
    ("non-root-off", lambda p: p["spec"]["containers"][0]["securityContext"].update(runAsNonRoot=False)),
    ("seccomp", lambda p: p["spec"]["securityContext"].pop("seccompProfile")),
    (
        "seccomp-unconfined",
        lambda p: p["spec"]["initContainers"][0]["securityContext"].update(
            seccompProfile={"type": "Unconfined"}
        ),
    ),
    ("host-path", lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
    ("host-network", lambda p: p["spec"].update(hostNetwork=True)),
    ("host-port", lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}])),
    ("proc-mount", lambda p: p["spec"]["containers"][0]["securityContext"].update(procMount="Unmasked")),
    (
        "sysctl",
        lambda p: p["spec"]["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    ),
    (
        "selinux-type-container",
        lambda p: p["spec"]["containers"][0]["securityContext"].update(seLinuxOptions={"type": "spc_t"}),
    ),
    (
        "selinux-type-pod",
        lambda p: p["spec"]["securityContext"].update(seLinuxOptions={"type": "unconfined_t"}),
    ),
    (
        "apparmor-container",
        lambda p: p["spec"]["initContainers"][1]["securityContext"].update(
            appArmorProfile={"type": "Unconfined"}
        ),
    ),
    ("apparmor-pod", lambda p: p["spec"]["securityContext"].update(appArmorProfile={"type": "Unconfined"})),
    (
        "apparmor-annotation",
        lambda p: p["metadata"]["annotations"].update(
            {"container.apparmor.security.beta.kubernetes.io/sandbox": "unconfined"}
        ),
    ),
]

#: What the restricted standard allows of the same fields (the checker must not refuse these).
ALLOWED: list[tuple[str, Any]] = [
    (
        f"selinux-{t}",
        lambda p, t=t: p["spec"]["containers"][0]["securityContext"].update(seLinuxOptions={"type": t}),
    )
    for t in ("container_t", "container_init_t", "container_kvm_t")
] + [
    ("selinux-level", lambda p: p["spec"]["securityContext"].update(seLinuxOptions={"level": "s0:c1,c2"})),
    (
        "apparmor-default",
        lambda p: p["spec"]["securityContext"].update(appArmorProfile={"type": "RuntimeDefault"}),
    ),
    (
        "apparmor-annotation-localhost",
        lambda p: p["metadata"]["annotations"].update(
            {"container.apparmor.security.beta.kubernetes.io/sandbox": "localhost/agent"}
        ),
    ),
    (
        "host-port-zero",
        lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 0}]),
    ),
]


@pytest.mark.parametrize(("case", "allow"), ALLOWED, ids=[a[0] for a in ALLOWED])
def test_the_restricted_checker_allows_what_restricted_allows(case: str, allow: Any) -> None:
    pod = build(MINIMAL_SPEC)
    allow(pod)
    assert restricted_violations(pod) == [], case


@pytest.mark.parametrize(("case", "breaker"), BREAKERS, ids=[b[0] for b in BREAKERS])
def test_the_restricted_checker_catches_each_violation(case: str, breaker: Any) -> None:
    pod = build(MINIMAL_SPEC)
    breaker(pod)
    assert restricted_violations(pod) != [], case


def test_builder_refuses_a_sandbox_that_skipped_validation() -> None:
    spec = SessionMemorySpec.model_validate(MINIMAL_SPEC)
    c = "spec.template.spec.containers[0]."
    for sandbox, pod, field in [
        ({"securityContext": {"privileged": True}}, {}, c + "securityContext.privileged"),
        ({"securityContext": {"runAsUser": 0}}, {}, c + "securityContext.runAsUser"),
        ({"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}, {}, "capabilities.add"),
        ({"volumeMounts": [{"name": "memsync-state", "mountPath": "/s"}]}, {}, c + "volumeMounts[0].name"),
        ({"volumeMounts": [{"name": "w", "mountPath": "/mnt/memory"}]}, {}, c + "volumeMounts[0].mountPath"),
        ({"name": "other"}, {}, c + "name"),
        ({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}, {}, "seLinuxOptions.type"),
        ({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}, {}, "appArmorProfile"),
        ({"ports": [{"containerPort": 80, "hostPort": 80}]}, {}, c + "ports[0].hostPort"),
        ({}, {"host_network": True}, "spec.template.spec.hostNetwork"),
        (
            {},
            {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
            "spec.template.spec.volumes[0].hostPath",
        ),
    ]:
        container = {"name": "sandbox", "image": "x", **sandbox}
        pod_spec = SandboxPodSpec.model_construct(containers=[container], **pod)
        template = SandboxTemplate.model_construct(spec=pod_spec)
        unchecked = spec.model_copy(update={"template": template})
        with pytest.raises(ValueError, match=re.escape(field)):
            build_sandbox_pod(name="a", namespace="n", uid=UID, spec=unchecked, agent_image=IMAGE)


# --- the secret ---------------------------------------------------------------------------------------------


def _envs(pod: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {c["name"]: c.get("env", []) for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}


def test_work_secret_reaches_memsync_containers_only_by_secret_key_ref() -> None:
    pod = build(MINIMAL_SPEC)
    envs = _envs(pod)
    for container in ("memsync-mount", "memsync-sync"):
        (entry,) = [e for e in envs[container] if e["name"] == "ANTHROPIC_WORK_SECRET"]
        assert "value" not in entry
        assert entry["valueFrom"] == {
            "secretKeyRef": {"name": "work-sesn-011abc", "key": "secret", "optional": False}
        }
    assert all(e["name"] != "ANTHROPIC_WORK_SECRET" for e in envs["sandbox"])
    # No literal anywhere: nothing in the Pod looks like a sessions token or a work-secret payload.
    text = json.dumps(pod)
    assert "sk-ant" not in text and "sessions_token" not in text
    assert "secret" not in {v.get("name") for v in pod["spec"]["volumes"]}


def test_state_volume_is_mounted_only_in_memsync_containers() -> None:
    pod = build(FULL_SPEC)
    for container in pod["spec"]["initContainers"]:
        assert {"name": "memsync-state", "mountPath": "/var/lib/memsync"} in container["volumeMounts"]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert mounts == [{"name": "memory", "mountPath": "/mnt/memory"}, {"name": "work", "mountPath": "/work"}]


# --- grace period, names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("flush", "grace"), [(5, 50), (30, 100), (45, 145), (300, 910)])
def test_grace_period_formula(flush: int, grace: int) -> None:
    assert grace_period_seconds(flush) == grace
    assert grace == max(SANDBOX_SHUTDOWN_SECONDS, flush) + 2 * flush + GRACE_MARGIN_SECONDS
    # Enough for the sandbox's shutdown (or the preStop flush, in parallel) and then both SIGTERM passes.
    assert grace > max(SANDBOX_SHUTDOWN_SECONDS, flush) + 2 * flush


def test_grace_period_in_the_pod_follows_final_flush_seconds() -> None:
    spec = {**MINIMAL_SPEC, "sync": {"finalFlushSeconds": 120}}
    assert build(spec)["spec"]["terminationGracePeriodSeconds"] == 120 + 240 + 10


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = st.from_regex(
    r"\A[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?){0,5}\Z"
)


def test_pod_names() -> None:
    assert pod_name_for("sesn-011abc") == "sesn-011abc-sandbox"
    dotted = pod_name_for("team.sesn-1")
    assert dotted.startswith("team-sesn-1-") and dotted.endswith("-sandbox") and _DNS_LABEL.match(dotted)
    assert pod_name_for("team.sesn-1") != pod_name_for("team-sesn-1")
    long = "a" * 200
    assert len(pod_name_for(long)) == 63 and _DNS_LABEL.match(pod_name_for(long))
    assert pod_name_for(long) != pod_name_for(long + "b")


@given(_DNS_SUBDOMAIN, _DNS_SUBDOMAIN)
def test_pod_names_are_deterministic_safe_and_distinct(a: str, b: str) -> None:
    name = pod_name_for(a)
    assert name == pod_name_for(a)
    assert len(name) <= 63 and _DNS_LABEL.match(name)
    if a != b:
        assert name != pod_name_for(b)


@given(_DNS_SUBDOMAIN)
def test_owner_label_values_are_valid_labels(name: str) -> None:
    value = owner_label_value(name)
    assert len(value) <= 63
    assert re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", value)
    if len(name) <= 63:
        assert value == name


def test_the_stores_folder_has_a_size_limit_that_memsync_requests_and_limits() -> None:
    """The memory emptyDir's sizeLimit, and both memsync containers' ephemeral-storage request (the
    folder's size) and limit (2Gi, never below the request): the operator's defaults, replaced by the
    SessionMemory's; a template's own ephemeral storage for memsync is kept, and a limit it sets alone
    caps the request (a LimitRange's default limit below the request would make the Pod invalid)."""

    def shape(pod: dict[str, Any]) -> tuple[str, str, str]:
        memory = next(v for v in pod["spec"]["volumes"] if v["name"] == "memory")
        mount, sync = pod["spec"]["initContainers"]
        assert (
            mount["resources"]["requests"]["ephemeral-storage"]
            == sync["resources"]["requests"]["ephemeral-storage"]
        )
        assert (
            mount["resources"]["limits"]["ephemeral-storage"]
            == sync["resources"]["limits"]["ephemeral-storage"]
        )
        return (
            memory["emptyDir"]["sizeLimit"],
            sync["resources"]["requests"]["ephemeral-storage"],
            sync["resources"]["limits"]["ephemeral-storage"],
        )

    assert shape(build(MINIMAL_SPEC)) == ("1Gi", "1Gi", "2Gi")
    assert shape(build(MINIMAL_SPEC, settings=PodSettings(memory_volume_size_limit="3Gi"))) == (
        "3Gi",
        "3Gi",
        "3Gi",
    )
    own = copy.deepcopy(MINIMAL_SPEC)
    own.setdefault("sync", {})["memoryVolumeSizeLimit"] = "256Mi"
    assert shape(build(own, settings=PodSettings(memory_volume_size_limit="3Gi"))) == (
        "256Mi",
        "256Mi",
        "2Gi",
    )
    configured = PodSettings(ephemeral_storage_request="200Mi", ephemeral_storage_limit="400Mi")
    assert shape(build(MINIMAL_SPEC, settings=configured)) == ("1Gi", "200Mi", "400Mi")
    custom = copy.deepcopy(MINIMAL_SPEC)
    custom["template"]["spec"]["memsync"] = {
        "resources": {"requests": {"cpu": "10m", "ephemeral-storage": "3Gi"}, "limits": {"memory": "256Mi"}}
    }
    assert shape(build(custom)) == ("1Gi", "3Gi", "3Gi")
    capped = copy.deepcopy(MINIMAL_SPEC)
    capped["template"]["spec"]["memsync"] = {"resources": {"limits": {"ephemeral-storage": "500Mi"}}}
    assert shape(build(capped)) == ("1Gi", "500Mi", "500Mi")


@pytest.mark.parametrize(
    ("resources", "asked", "limit", "expected"),
    [
        ({}, "1Gi", "2Gi", ("1Gi", "2Gi")),
        ({}, "4Gi", "2Gi", ("4Gi", "4Gi")),
        ({"limits": {"ephemeral-storage": "500Mi"}}, "1Gi", "2Gi", ("500Mi", "500Mi")),
        ({"requests": {"ephemeral-storage": "3Gi"}}, "1Gi", "2Gi", ("3Gi", "3Gi")),
        ({"requests": {"ephemeral-storage": "100M"}}, "1Gi", "2Gi", ("100M", "2Gi")),
    ],
)
def test_ephemeral_storage_limit_is_never_below_the_request(
    resources: dict[str, Any], asked: str, limit: str, expected: tuple[str, str]
) -> None:
    out = with_ephemeral_storage(resources, asked, limit)
    assert (out["requests"]["ephemeral-storage"], out["limits"]["ephemeral-storage"]) == expected


def test_a_restart_pod_has_its_own_name_and_attempt() -> None:
    pod = build(MINIMAL_SPEC, name="s1", attempt=2)
    assert pod["metadata"]["name"] == "s1-sandbox-2" == pod_name_for("s1", 2)
    assert pod["metadata"]["labels"][LABEL_ATTEMPT] == "2"
    assert attempt_of_pod(pod) == 2
    assert attempt_of_pod(build(MINIMAL_SPEC, name="s1")) == 0
    long_name = "a" * 70
    assert len(pod_name_for(long_name, 3)) <= 63 and pod_name_for(long_name, 3).endswith("-sandbox-3")


def test_the_spec_hash_follows_what_the_pod_is_built_from() -> None:
    base = SessionMemorySpec.model_validate(MINIMAL_SPEC)
    same = SessionMemorySpec.model_validate(copy.deepcopy(MINIMAL_SPEC))
    assert (
        spec_hash(base)
        == spec_hash(same)
        == build(MINIMAL_SPEC)["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
    )
    changed = copy.deepcopy(MINIMAL_SPEC)
    changed["template"]["spec"]["containers"][0]["args"] = ["--other"]
    assert spec_hash(SessionMemorySpec.model_validate(changed)) != spec_hash(base)
    deadline_only = {**copy.deepcopy(MINIMAL_SPEC), "startDeadlineSeconds": 60, "onInterruption": "Restart"}
    assert spec_hash(SessionMemorySpec.model_validate(deadline_only)) == spec_hash(base)
