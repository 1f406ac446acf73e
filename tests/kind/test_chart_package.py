"""A release as a user installs it, from its folder alone: ``make release`` (release/release.sh) for the image
under test puts the wheel, the sdist, the image as an OCI archive with its digest and the chart packaged with
that digest into a folder; the archive is loaded into the kind node as a registry would serve it (by name and
by digest), and ``helm install`` of the packaged chart runs an operator on the image pinned by that digest.

The release goes into a namespace of its own with namespaced RBAC watching only that namespace, so it
creates no cluster-scoped object beside the kind overlay's operator (the CRDs exist already: Helm leaves
them as they are)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import memsync
from support.tools import tool

from .conftest import CLUSTER, NODE, KindEnv, dump_cluster_state, kubectl, kubectl_json, run

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1200, func_only=True)]

VERSION = memsync.__version__


@pytest.fixture
def release_namespace(kind_env: KindEnv) -> Iterator[str]:
    name = f"memsync-pkg-{uuid.uuid4().hex[:8]}"
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def own_image(kind_env: KindEnv) -> Iterator[str]:
    tag = image_of_its_own(kind_env.image)
    yield tag
    run("docker", "rmi", tag, check=False)


def image_of_its_own(image: str) -> str:
    """The image under test with one label more: a config, and so an image, the node does not hold from the
    kind overlay, so what the release's operator runs can only have come from the release's archive."""
    tag = "memsync:release-test"
    built = subprocess.run(
        ["docker", "build", "--quiet", "--tag", tag, "-"],
        input=f"FROM {image}\nLABEL org.opencontainers.image.version={VERSION}-kind-test\n",
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return tag


def release(dist: Path, image: str, helm: Path) -> str:
    """``make release`` of ``image`` into ``dist``; its stdout (the files it made)."""
    env = {"RELEASE_IMAGE": image, "PYTHON": sys.executable, "HELM": str(helm)}
    made = run("make", "--no-print-directory", "release", f"DIST={dist}", env=env, timeout=900)
    return made.stdout


def load_as_a_registry_would(archive: Path, digest: str) -> None:
    """The OCI archive into the node's containerd under the names a pull would give it: memsync:VERSION
    and memsync@DIGEST, the manifest's digest (an image referred to by digest is found by that name;
    ``ctr images import --digests`` names the archive's index instead)."""
    with archive.open("rb") as data:
        loaded = subprocess.run(
            ["docker", "exec", "-i", NODE, "ctr", "-n", "k8s.io", "images", "import", "--all-platforms",
             "--base-name", "docker.io/library/memsync", "--digests", "-"],
            stdin=data, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    assert loaded.returncode == 0, f"ctr images import: {loaded.stdout}\n{loaded.stderr}"
    run(
        "docker", "exec", NODE, "ctr", "-n", "k8s.io", "images", "tag", "--force",
        f"docker.io/library/memsync:{VERSION}", f"docker.io/library/memsync@{digest}",
    )  # fmt: skip


def node_images() -> str:
    return run("docker", "exec", NODE, "ctr", "-n", "k8s.io", "images", "ls").stdout


def test_a_release_installs_from_its_folder_alone_pinned_by_digest(
    kind_env: KindEnv, own_image: str, release_namespace: str, tmp_path: Path
) -> None:
    helm = tool("helm")
    dist = tmp_path / "dist with space"
    release(dist, own_image, helm)
    names = sorted(p.name for p in dist.iterdir())
    assert names == sorted(
        [
            f"memsync-{VERSION}-py3-none-any.whl",
            f"memsync-{VERSION}.tar.gz",
            f"memsync-{VERSION}.tgz",
            "index.yaml",
            f"memsync-{VERSION}.oci.tar",
            f"memsync-{VERSION}.image-digest",
            "SHA256SUMS",
        ]
    )
    checked = subprocess.run(
        ["sha256sum", "--check", "--quiet", "SHA256SUMS"],
        cwd=dist, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    digest = (dist / f"memsync-{VERSION}.image-digest").read_text().strip()
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    index = yaml.safe_load((dist / "index.yaml").read_text())
    assert [e["urls"] for e in index["entries"]["memsync"]] == [[f"memsync-{VERSION}.tgz"]]

    load_as_a_registry_would(dist / f"memsync-{VERSION}.oci.tar", digest)
    listed = node_images()
    refs = {line.split()[0]: line.split()[2] for line in listed.splitlines()[1:] if line.strip()}
    assert refs.get(f"docker.io/library/memsync:{VERSION}") == digest, listed  # the archive's own digest
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {"rbac": {"scope": "namespaced"}, "operator": {"watchNamespaces": [release_namespace]}}
        )
    )
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "helm-config"),
        "HELM_DATA_HOME": str(tmp_path / "helm-data"),
    }
    installed = run(
        str(helm), "install", "memsync", str(dist / f"memsync-{VERSION}.tgz"), "--kube-context",
        f"kind-{CLUSTER}", "--namespace", release_namespace, "--create-namespace", "-f", str(values),
        "--wait", "--timeout", "5m",
        env=env, check=False, timeout=400,
    )  # fmt: skip
    assert installed.returncode == 0, (
        f"{installed.stdout}\n{installed.stderr}\n{node_images()}\n{dump_cluster_state()}"
    )
    kubectl(
        "-n", release_namespace, "rollout", "status", "deployment/memsync-operator", "--timeout=300s",
        timeout=330,
    )  # fmt: skip
    deployment = kubectl_json("-n", release_namespace, "get", "deployment", "memsync-operator")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert {c["image"] for c in containers} == {f"memsync@{digest}"}, "the image the release pinned"
    assert deployment["status"].get("readyReplicas") == deployment["spec"]["replicas"]
    run(
        str(helm), "uninstall", "memsync", "--kube-context", f"kind-{CLUSTER}", "--namespace",
        release_namespace, "--wait", env=env, timeout=300,
    )  # fmt: skip
