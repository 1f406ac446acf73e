"""The process kubelet's pure decisions: image table, environment, identity, phase and conditions."""

from __future__ import annotations

from typing import Any

import pytest

from .tier.podspec import (
    ConfigError,
    ContainerView,
    ImageError,
    Lookups,
    container_env,
    container_identity,
    image_config,
    pod_conditions,
    pod_phase,
    referenced_names,
)


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "x"}},
        "spec": {"nodeName": "n1", "serviceAccountName": "sa", **spec},
        "status": {"podIP": "10.213.1.2"},
    }


def test_images_map_onto_local_environments() -> None:
    memsync = image_config("memsync:kind")
    assert memsync.env["PATH"].split(":")[0].endswith("bin") and memsync.users == (("memsync", 65532, 65532),)
    assert image_config("ghcr.io/org/memsync@sha256:abc") == memsync
    assert image_config("busybox:1.36").env["PATH"].startswith("/usr/local/sbin")
    with pytest.raises(ImageError, match=r'image "nginx:1" is not in'):
        image_config("nginx:1")


def test_env_order_refs_and_expansion() -> None:
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "A", "value": "1"},
            {"name": "B", "value": "$(A)-$(NOPE)-$$"},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "x"}}},
            {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "O", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": True}}},
        ],
    }
    lookups = Lookups(secrets={"s": {"k": "v"}}, config_maps={"cm": {"x": "y"}})
    env = container_env(pod(), container, {"HOME": "/"}, lookups)
    assert env == {
        "HOME": "/",
        "CM_x": "y",
        "A": "1",
        "B": "1-$(NOPE)-$",
        "S": "v",
        "C": "y",
        "N": "ns",
        "L": "x",
        "IP": "10.213.1.2",
    }
    assert referenced_names(pod(containers=[container])) == ({"s", "gone"}, {"cm"})


def test_missing_secret_or_key_is_a_config_error() -> None:
    ref = {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    with pytest.raises(ConfigError, match='secret "s" not found'):
        container_env(pod(), {"env": [ref]}, {}, Lookups({}, {}))
    with pytest.raises(ConfigError, match="couldn't find key k in Secret ns/s"):
        container_env(pod(), {"env": [ref]}, {}, Lookups({"s": {}}, {}))


def test_identity_from_pod_and_container_security_context() -> None:
    p = pod(
        securityContext={"runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 3000, "supplementalGroups": [4]}
    )
    ident = container_identity(p, {"securityContext": {"runAsUser": 1001, "readOnlyRootFilesystem": True}})
    assert (ident.uid, ident.gid, ident.groups, ident.read_only_root) == (1001, 2000, (2000, 4, 3000), True)
    with pytest.raises(ConfigError, match="runAsNonRoot"):
        container_identity(pod(securityContext={"runAsNonRoot": True}), {})


def view(
    kind: str, *, running: bool = False, code: int | None = None, restart: bool = False
) -> ContainerView:
    return ContainerView(kind, running, running, running, code, restart)  # type: ignore[arg-type]


def test_phase() -> None:
    sidecar = view("sidecar", running=True, restart=True)
    assert pod_phase(
        "Never", [sidecar, view("main")], init_failed=False, deleting=False, all_stopped=False
    ) == ("Pending")
    running = [sidecar, view("main", running=True)]
    assert pod_phase("Never", running, init_failed=False, deleting=False, all_stopped=False) == "Running"
    done = [view("sidecar", code=0, restart=True), view("main", code=0)]
    assert pod_phase("Never", done, init_failed=False, deleting=False, all_stopped=True) == "Succeeded"
    # the sidecar still runs: not terminal yet
    assert (
        pod_phase(
            "Never", [sidecar, view("main", code=0)], init_failed=False, deleting=False, all_stopped=False
        )
        == "Running"
    )
    failed = [view("main", code=1)]
    assert pod_phase("Never", failed, init_failed=False, deleting=False, all_stopped=True) == "Failed"
    assert (
        pod_phase(
            "Always",
            [view("main", code=1, restart=True)],
            init_failed=False,
            deleting=False,
            all_stopped=False,
        )
        == "Running"
    )
    assert pod_phase("Never", [view("main")], init_failed=True, deleting=False, all_stopped=True) == "Failed"
    killed = [view("main", code=143)]
    assert pod_phase("Always", killed, init_failed=False, deleting=True, all_stopped=True) == "Failed"


def test_ready_needs_every_sidecar_and_main_ready() -> None:
    conds = pod_conditions(
        [view("init", code=0), view("sidecar", running=True), view("main", running=True)],
        sandbox_ready=True,
        initialized=True,
        phase="Running",
    )
    assert {c["type"]: c["status"] for c in conds} == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    not_ready = ContainerView("sidecar", True, True, False, None, True)
    conds = pod_conditions(
        [not_ready, view("main", running=True)], sandbox_ready=True, initialized=True, phase="Running"
    )
    assert {c["type"]: c["status"] for c in conds}["Ready"] == "False"


def test_container_paths_resolve_symlinks_inside_the_container_root(tmp_path: Any) -> None:
    from .tier.launcher import inside

    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")  # an absolute link, as in every Debian image
    (root / "etc").mkdir()
    (root / "etc" / "alt").symlink_to("../run")
    assert inside(root, "/var/run/secrets/token") == root / "run" / "secrets" / "token"
    assert inside(root, "/etc/alt/x") == root / "run" / "x"
    assert inside(root, "/../../etc/passwd") == root / "etc" / "passwd"  # never above the root
