"""Extra environment for the memsync containers (proxy, CA bundle): from the spec and the operator's
defaults, never for memsync's own variables, never for the sandbox container."""

from __future__ import annotations

from typing import Any

import click
import pytest

from memsync.agent.config import ConfigError, load_config
from memsync.cli.operator import parse_memsync_env
from memsync.controller.sessionmemory.pod import (
    MEMSYNC_RESOURCES,
    MOUNT_CONTAINER,
    SYNC_CONTAINER,
    PodSettings,
    build_sandbox_pod,
    memsync_env,
)
from memsync.crd.env_spec import EnvVarSpec
from memsync.crd.models import validate_spec
from memsync.crd.schema import build_crd
from memsync.crd.spec_messages import InvalidSpecError


def spec(memsync: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A spec whose template sets ``memsync`` (the memsync containers' env and resources) when given."""
    pod: dict[str, Any] = {"containers": [{"name": "sandbox", "image": "busybox"}]}
    if memsync is not None:
        pod["memsync"] = memsync
    return {
        "sessionId": "sesn_env",
        "workItemSecretRef": {"name": "work", "key": "secret"},
        "stores": [{"memoryStoreId": "memstore_01aa", "name": "notes"}],
        "template": {"spec": pod},
        **extra,
    }


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}


def test_spec_env_and_operator_defaults_reach_both_memsync_containers_only() -> None:
    s = validate_spec(
        spec(
            memsync={
                "env": [
                    {"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"},
                    {"name": "SSL_CERT_FILE", "value": "/etc/ssl/corp.pem"},
                    {"name": "PROXY_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "proxy", "key": "pw"}}},
                ]
            }
        )
    )
    defaults = (
        EnvVarSpec(name="NO_PROXY", value="10.0.0.0/8,.svc"),
        EnvVarSpec(name="HTTPS_PROXY", value="http://default-proxy:3128"),
    )
    pod = build_sandbox_pod(
        name="s",
        namespace="ns",
        uid="u",
        spec=s,
        agent_image="memsync:t",
        settings=PodSettings(memsync_env_defaults=defaults),
    )
    by_name = containers(pod)
    own = len(memsync_env(s))
    for name in (MOUNT_CONTAINER, SYNC_CONTAINER):
        env = by_name[name]["env"]
        extra = [e for e in env[own:] if e["name"] != "MEMSYNC_METRICS_PORT"]
        assert extra == [
            {"name": "NO_PROXY", "value": "10.0.0.0/8,.svc"},
            {"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"},  # the spec replaces the default
            {"name": "SSL_CERT_FILE", "value": "/etc/ssl/corp.pem"},
            {"name": "PROXY_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "proxy", "key": "pw"}}},
        ]
        assert env[:own] == memsync_env(s)  # memsync's own come first and are never replaced
    assert "env" not in by_name["sandbox"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "MEMSYNC_STORES", "value": "[]"}, "MEMSYNC_STORES is memsync's own variable"),
        ({"name": "ANTHROPIC_WORK_SECRET", "value": "x"}, "ANTHROPIC_WORK_SECRET is memsync's own variable"),
        ({"name": "memsync_sync_interval", "value": "1"}, "is memsync's own variable"),
        ({"name": "1BAD", "value": "x"}, "must be an environment variable name"),
        (
            {"name": "A", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            "exactly one",
        ),
        ({"name": "A"}, "set exactly one of value or valueFrom"),
        (
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            "secretKeyRef, configMapKeyRef",
        ),
    ],
)
def test_bad_entries_are_refused_naming_the_field(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpecError) as info:
        validate_spec(spec(memsync={"env": [entry]}))
    assert "spec.template.spec.memsync.env" in str(info.value) and message in str(info.value)


def test_a_name_set_twice_is_refused() -> None:
    with pytest.raises(InvalidSpecError, match="repeats"):
        validate_spec(spec(memsync={"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}))


def test_the_crd_declares_memsync_env_and_resources() -> None:
    version = build_crd()["spec"]["versions"][0]
    template = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["template"]
    memsync = template["properties"]["spec"]["properties"]["memsync"]["properties"]
    assert memsync["env"]["type"] == "array" and memsync["env"]["items"]["required"] == ["name"]
    assert set(memsync["env"]["items"]["properties"]["valueFrom"]["properties"]) == {
        "secretKeyRef",
        "configMapKeyRef",
    }
    assert set(memsync["resources"]["properties"]) >= {"requests", "limits"}


def test_template_resources_replace_the_default_of_both_memsync_containers_only() -> None:
    resources = {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "2Gi"}}
    pod = build_sandbox_pod(
        name="s", namespace="ns", uid="u", spec=validate_spec(spec({"resources": resources})), agent_image="m"
    )
    by_name = containers(pod)
    # both also request the stores' folder's size as ephemeral storage, with a limit (the template set none)
    with_storage = {
        "requests": {**resources["requests"], "ephemeral-storage": "1Gi"},
        "limits": {**resources["limits"], "ephemeral-storage": "2Gi"},
    }
    assert by_name[MOUNT_CONTAINER]["resources"] == with_storage
    assert by_name[SYNC_CONTAINER]["resources"] == with_storage
    assert "resources" not in by_name["sandbox"]
    default = containers(
        build_sandbox_pod(name="s", namespace="ns", uid="u", spec=validate_spec(spec()), agent_image="m")
    )
    default_storage = {
        "requests": {**MEMSYNC_RESOURCES["requests"], "ephemeral-storage": "1Gi"},
        "limits": {**MEMSYNC_RESOURCES["limits"], "ephemeral-storage": "2Gi"},
    }
    assert default[MOUNT_CONTAINER]["resources"] == default[SYNC_CONTAINER]["resources"] == default_storage
    with pytest.raises(
        InvalidSpecError, match=r"spec\.template\.spec\.memsync\.resources\.limits\.memory: must match"
    ):
        validate_spec(spec({"resources": {"limits": {"memory": "lots"}}}))


def test_operator_defaults_are_validated_like_the_spec() -> None:
    assert parse_memsync_env('[{"name": "NO_PROXY", "value": ".svc"}]') == (
        EnvVarSpec(name="NO_PROXY", value=".svc"),
    )
    assert parse_memsync_env(None) == ()
    with pytest.raises(click.BadParameter, match="memsync's own variable"):
        parse_memsync_env('[{"name": "MEMSYNC_FLUSH_TIMEOUT", "value": "1"}]')
    with pytest.raises(click.BadParameter, match="set exactly one"):
        parse_memsync_env('[{"name": "NO_PROXY"}]')


def test_conflict_policy_reaches_the_agent_only_when_it_is_not_the_default() -> None:
    keep = validate_spec(spec(sync={"conflictPolicy": "keepLocalCopy"}))
    assert {"name": "MEMSYNC_CONFLICT_POLICY", "value": "keepLocalCopy"} in memsync_env(keep)
    default = validate_spec(spec())
    assert all(e["name"] != "MEMSYNC_CONFLICT_POLICY" for e in memsync_env(default))
    with pytest.raises(InvalidSpecError, match=r"spec\.sync\.conflictPolicy"):
        validate_spec(spec(sync={"conflictPolicy": "localWins"}))


def test_the_agent_reads_the_conflict_policy_and_refuses_an_unknown_one() -> None:
    stores = '[{"memory_store_id": "memstore_01aa", "mount_path": "/mnt/memory/notes"}]'
    assert load_config(stores=stores, conflict_policy="keepLocalCopy").conflict_policy == "keepLocalCopy"
    assert load_config(stores=stores).conflict_policy == "storeWins"
    with pytest.raises(ConfigError, match=r"conflict_policy \(MEMSYNC_CONFLICT_POLICY\)"):
        load_config(stores=stores, conflict_policy="localWins")
