"""``make chart``: the chart packaged with the one version as its version and appVersion, the release's image
repository in its values (the tag following the appVersion), and a repository index that lists it."""

from __future__ import annotations

import hashlib
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

import memsync
from support.chart_package import package_chart
from support.tools import BUILD_TIMEOUT_S, tool

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

VERSION = memsync.__version__
IMAGE = "registry.example.com/memsync"
URL = "https://charts.example.com/memsync"


def member(archive: Path, name: str) -> Any:
    with tarfile.open(archive) as tgz:
        handle = tgz.extractfile(f"memsync/{name}")
        assert handle is not None, name
        return yaml.safe_load(handle.read())


def test_make_chart_packages_the_release_and_indexes_it(tmp_path: Path) -> None:
    helm = tool("helm")
    tgz = package_chart(tmp_path / "out", helm, IMAGE, url=URL)
    assert sorted(p.name for p in tgz.parent.iterdir()) == ["index.yaml", tgz.name]
    chart = member(tgz, "Chart.yaml")
    assert (chart["name"], chart["version"], chart["appVersion"]) == ("memsync", VERSION, VERSION)
    values = member(tgz, "values.yaml")
    assert values["image"] == {**values["image"], "repository": IMAGE, "tag": "", "digest": ""}
    with tarfile.open(tgz) as archive:
        names = set(archive.getnames())
        assert all(archive.getmember(n).isfile() or archive.getmember(n).isdir() for n in names)
    assert {
        "memsync/files/grafana-dashboard.json",
        "memsync/crds/sessionmemories.agents.memsync.dev.yaml",
    } <= (names)  # the links of the source tree are packaged as the files they name
    index = yaml.safe_load((tgz.parent / "index.yaml").read_text())
    [entry] = index["entries"]["memsync"]
    assert (entry["version"], entry["appVersion"]) == (VERSION, VERSION)
    assert entry["urls"] == [f"{URL}/{tgz.name}"]
    assert entry["digest"] == hashlib.sha256(tgz.read_bytes()).hexdigest()
    rendered = subprocess.run(
        [str(helm), "template", "memsync", str(tgz), "--namespace", "memsync-system"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    deployment = next(
        doc
        for doc in yaml.safe_load_all(rendered.stdout)
        if doc and doc["kind"] == "Deployment" and doc["metadata"]["name"] == "memsync-operator"
    )
    images = {c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert images == {f"{IMAGE}:{VERSION}"}


def test_the_release_tag_can_differ_from_the_app_version(tmp_path: Path) -> None:
    tgz = package_chart(tmp_path / "out", tool("helm"), "memsync", tag="e2e-abc")
    assert member(tgz, "values.yaml")["image"]["tag"] == "e2e-abc"
    assert "urls" in yaml.safe_load((tgz.parent / "index.yaml").read_text())["entries"]["memsync"][0]
