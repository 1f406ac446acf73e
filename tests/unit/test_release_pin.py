"""``make pin-image``: after a release's image is pushed, one step points the production overlay and a Helm
values file at it by digest. Run on a copy of the manifests, rendered with ``kubectl kustomize``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

import memsync

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab12" * 16


def test_pin_image_points_the_production_overlay_and_helm_at_the_digest(tmp_path: Path) -> None:
    manifests = tmp_path / "a checkout" / "manifests"
    shutil.copytree(REPO / "manifests", manifests)
    shutil.copytree(REPO / "crds", manifests.parent / "crds")  # the base includes the CRDs
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / f"memsync-{memsync.__version__}.image-digest").write_text(DIGEST + "\n")
    for repository in ("registry.example.com/memsync", "other.example/team/memsync"):  # twice: it re-pins
        done = subprocess.run(
            ["make", "--no-print-directory", "-C", str(REPO), "pin-image", f"REPOSITORY={repository}",
             f"DIST={dist}", f"OVERLAY={manifests / 'overlays' / 'production'}"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(manifests / "overlays" / "production")],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    operator = next(doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] == "Deployment")
    container = operator["spec"]["template"]["spec"]["containers"][0]
    pinned = f"other.example/team/memsync@{DIGEST}"
    assert container["image"] == pinned
    assert {"name": "MEMSYNC_AGENT_IMAGE", "value": pinned} in container["env"]
    values = yaml.safe_load((dist / "values-image.yaml").read_text())
    assert values == {"image": {"repository": "other.example/team/memsync", "digest": DIGEST}}


def test_pin_image_without_a_repository_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "pin-image", f"DIST={tmp_path}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "usage: make pin-image REPOSITORY=" in done.stderr
