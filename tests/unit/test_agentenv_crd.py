"""The AgentEnvironment CRD and its pydantic model: same accept/refuse decisions (through the emulated API
server: defaults, structural schema, CEL rules), the generated file checked in, pieces shared with
SessionMemory."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from test_crd_apiserver import apply_defaults, cel_errors, structural_errors
from test_manifests import K8S_VERSION

from memsync.crd import agentenv_schema, sandbox_schema, schema
from memsync.crd.agentenv import API_VERSION, KIND, AgentEnvironmentSpec, validate_environment_spec
from memsync.crd.models import SandboxTemplate
from memsync.crd.spec_messages import InvalidSpecError

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "agentenvironments.agents.memsync.dev.yaml"


def base_spec() -> dict[str, Any]:
    return {
        "environmentId": "env_01abc",
        "environmentKeySecretRef": {"name": "env-key", "key": "key"},
        "template": {"spec": {"containers": [{"name": "sandbox", "image": "example.com/agent-sandbox:1.0"}]}},
    }


def aenv(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "a", "namespace": "n"},
        "spec": spec,
    }


def admit(obj: dict[str, Any], old: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    root: dict[str, Any] = agentenv_schema.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    stored = apply_defaults(root, copy.deepcopy(obj))
    errors = structural_errors(root, stored)
    if errors:
        return stored, errors
    if old is None:
        return stored, cel_errors(root, stored)
    return stored, cel_errors(root, stored, apply_defaults(root, copy.deepcopy(old)))


def setting(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(spec: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = spec
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value

    return mutate


def dropping(field: str) -> Callable[[dict[str, Any]], None]:
    return lambda spec: spec.pop(field)


MODEL_ONLY = "model-only"
CORPUS: list[tuple[str, Callable[[dict[str, Any]], None] | None, bool | str, str]] = [
    ("minimal", None, True, ""),
    (
        "everything",
        lambda s: s.update(
            apiBaseUrl="http://memsync-store.memsync-system.svc:8080",
            maxConcurrentSessions=3,
            finishedRetentionSeconds=0,
            workerId="team-a.worker-1",
            sync={"intervalSeconds": 30, "deletions": "log_only", "finalFlushSeconds": 60},
            template={
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "containers": [{"name": "sandbox", "image": "example.com/agent-sandbox:1.0"}],
                    "runtimeClassName": "gvisor",
                    "memsync": {"env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]},
                },
            },
        ),
        True,
        "",
    ),
    ("no environment id", dropping("environmentId"), False, "spec.environmentId: is required"),
    (
        "bad environment id",
        setting("environmentId", "sesn_1"),
        False,
        "spec.environmentId: must look like env_",
    ),
    ("no key ref", dropping("environmentKeySecretRef"), False, "spec.environmentKeySecretRef: is required"),
    (
        "bad key name",
        setting("environmentKeySecretRef.name", "Bad_Name"),
        False,
        "environmentKeySecretRef.name",
    ),
    ("no template", dropping("template"), False, "spec.template: is required"),
    (
        "sandbox without image",
        setting("template.spec.containers", [{"name": "sandbox"}]),
        False,
        "spec.template.spec.containers[0].image: is required",
    ),
    (
        "privileged sandbox",
        setting(
            "template.spec.containers",
            [{"name": "sandbox", "image": "x:1", "securityContext": {"privileged": True}}],
        ),
        False,
        "privileged",
    ),
    ("host network", setting("template.spec.hostNetwork", True), False, "hostNetwork"),
    ("zero concurrency", setting("maxConcurrentSessions", 0), False, "spec.maxConcurrentSessions"),
    ("huge concurrency", setting("maxConcurrentSessions", 1001), False, "spec.maxConcurrentSessions"),
    ("negative retention", setting("finishedRetentionSeconds", -1), False, "spec.finishedRetentionSeconds"),
    ("string concurrency", setting("maxConcurrentSessions", "3"), False, "spec.maxConcurrentSessions"),
    ("fast sync", setting("sync.intervalSeconds", 1), False, "spec.sync.intervalSeconds"),
    ("bad worker id", setting("workerId", "-x"), False, "spec.workerId"),
    ("bad url", setting("apiBaseUrl", "ftp://x"), False, "spec.apiBaseUrl"),
    # the CRD does not refuse memsync's own names (nor does SessionMemory's): the model does
    (
        "reserved env",
        setting("template.spec.memsync", {"env": [{"name": "MEMSYNC_X", "value": "1"}]}),
        MODEL_ONLY,
        "memsync's own",
    ),
    (
        "unknown field",
        setting("stores", []),
        False,
        "spec.stores: is not a field of the AgentEnvironment schema",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "accepted", "fragment"), CORPUS, ids=[c[0] for c in CORPUS])
def test_model_and_crd_agree(
    case: str, mutate: Callable[[dict[str, Any]], None] | None, accepted: bool | str, fragment: str
) -> None:
    spec = base_spec()
    if mutate is not None:
        mutate(spec)
    _, api_errors = admit(aenv(spec))
    model_error = ""
    try:
        validate_environment_spec(spec)
    except InvalidSpecError as exc:
        model_error = str(exc)
    assert (api_errors == []) is (accepted is True or accepted == MODEL_ONLY), (
        f"{case}: API server {api_errors}"
    )
    assert (model_error == "") is (accepted is True), f"{case}: model verdict {model_error!r}"
    assert fragment in model_error


def test_defaults_of_schema_and_model_agree() -> None:
    stored, errors = admit(aenv(base_spec()))
    assert errors == []
    model = AgentEnvironmentSpec.model_validate(base_spec())
    assert stored["spec"] == model.model_dump(by_alias=True, exclude_none=True)
    assert stored["spec"]["maxConcurrentSessions"] == 10
    assert stored["spec"]["finishedRetentionSeconds"] == 3600
    assert stored["spec"]["sync"]["finalFlushSeconds"] == 30


def test_environment_id_is_immutable() -> None:
    old = aenv(base_spec())
    assert admit(aenv({**base_spec(), "maxConcurrentSessions": 2}), old)[1] == []
    errors = admit(aenv({**base_spec(), "environmentId": "env_other"}), old)[1]
    assert errors == [".spec.environmentId: environmentId is immutable: create a new AgentEnvironment"]


def test_the_template_and_sync_schemas_are_the_session_memorys() -> None:
    props = agentenv_schema.spec_schema()["properties"]
    assert props["template"] == sandbox_schema.template_schema()
    assert props["sync"] == schema.sync_schema()
    assert AgentEnvironmentSpec.model_fields["template"].annotation is SandboxTemplate


def test_the_agent_environment_keeps_its_own_version() -> None:
    version = agentenv_schema.build_crd()["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert API_VERSION == "agents.memsync.dev/v1alpha1"


def test_checked_in_crd_is_generated() -> None:
    assert CRD_FILE.read_text() == agentenv_schema.render_crd_yaml(), "crds/ is stale: run `make crds`"
    assert yaml.safe_load(CRD_FILE.read_text()) == agentenv_schema.build_crd()


def test_crd_validates_against_the_kubernetes_schema_and_names() -> None:
    crd = agentenv_schema.build_crd()
    kubernetes_validate.validate(crd, K8S_VERSION, strict=True)
    assert crd["metadata"]["name"] == "agentenvironments.agents.memsync.dev"
    names = crd["spec"]["names"]
    assert (names["kind"], names["shortNames"]) == ("AgentEnvironment", ["aenv"])
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {
        "phase",
        "conditions",
        "active",
        "claimed",
        "succeeded",
        "failed",
        "lastPollTime",
        "lastError",
    } <= set(status)


def test_the_sample_is_valid() -> None:
    sample = yaml.safe_load((REPO / "manifests" / "samples" / "agentenvironment.yaml").read_text())
    assert admit(sample)[1] == []
    assert validate_environment_spec(sample["spec"]).max_concurrent_sessions == 5


def test_the_environments_rbac_grants_what_the_loop_calls() -> None:
    docs = list(yaml.safe_load_all((REPO / "manifests" / "environments" / "rbac.yaml").read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    roles = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "ClusterRole"}
    # the Secret rules are a role of their own, to be bound in some namespaces only
    assert set(roles) == {"memsync-operator-environments", "memsync-operator-environment-secrets"}
    grants = {
        (g, r): set(rule["verbs"])
        for role in roles.values()
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert grants == {
        ("agents.memsync.dev", "agentenvironments"): {"get", "list", "watch", "patch"},
        ("agents.memsync.dev", "agentenvironments/status"): {"patch"},
        ("agents.memsync.dev", "agentenvironments/finalizers"): {"update"},
        ("agents.memsync.dev", "sessionmemories"): {"create", "delete"},
        ("", "secrets"): {"create", "delete"},  # never list or watch
    }
