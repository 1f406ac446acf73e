"""The image users deploy, as the Pods run it: a non-root user, a read-only root filesystem, and every
entrypoint the operator's Deployment, the store server and the sandbox Pod call. Needs docker (the kind tier's
prerequisites); the image is the one the kind scenarios run."""

from __future__ import annotations

import json

import pytest

from .conftest import run

pytestmark = [pytest.mark.kind, pytest.mark.timeout(300, func_only=True)]

#: The commands the manifests and the Pod builder give the image's containers (their --help must work).
ENTRYPOINTS = (
    ("operator",),  # the operator's Deployment
    ("store", "serve"),  # the store server's Deployment
    ("mount",),  # the init container memsync-mount
    ("sync",),  # the native sidecar memsync-sync
    ("flush",),  # the sidecar's preStop hook
    ("session", "run"),  # an AgentEnvironment's sandbox
    ("status",),  # kubectl memsync status
)


def docker_run(image: str, *args: str, entrypoint: str | None = None, check: bool = True) -> str:
    """``docker run`` as a Pod would run it: read-only root, no capabilities, nothing else mounted."""
    cmd = ["docker", "run", "--rm", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    return run(*cmd, image, *args, check=check).stdout


def test_the_image_runs_as_the_non_root_user_65532(image: str) -> None:
    config = json.loads(run("docker", "image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == "65532:65532"
    assert docker_run(image, "-u", entrypoint="id").strip() == "65532"
    assert docker_run(image, "-g", entrypoint="id").strip() == "65532"


@pytest.mark.parametrize("entrypoint", ENTRYPOINTS, ids=" ".join)
def test_every_entrypoint_answers_on_a_read_only_root(image: str, entrypoint: tuple[str, ...]) -> None:
    out = docker_run(image, *entrypoint, "--help")
    assert "Usage: memsync " + " ".join(entrypoint) in out, out


def test_nothing_is_compiled_or_written_at_run_time(image: str) -> None:
    """The bytecode is compiled at build time; a read-only root with no /tmp still imports every part."""
    parts = "memsync.agent.commands, memsync.controller.sessionmemory.registry, memsync.server.app"
    script = f"import {parts}; print('ok')"
    assert docker_run(image, "-c", script, entrypoint="python").strip() == "ok"


def test_the_build_time_ca_bundle_is_not_in_the_image(image: str) -> None:
    found = docker_run(
        image,
        "-c",
        "find / -xdev \\( -name extra-ca.pem -o -name build-ca.pem \\) -print; ls -d /src 2>&1 || true",
        entrypoint="sh",
    )
    assert "extra-ca.pem" not in found and "build-ca.pem" not in found, found
    assert "No such file" in found, found
