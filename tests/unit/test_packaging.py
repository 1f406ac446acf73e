"""Packaging hygiene: the license is the one pyproject declares, and constraints.txt pins every dependency
(runtime and test) at a version pyproject allows, and is what make install and the image install with."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]


def pins() -> dict[str, Version]:
    pinned: dict[str, Version] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)", line)
        assert match, f"constraints.txt: not an exact pin: {line!r}"
        name = canonicalize_name(match.group(1))
        assert name not in pinned, f"constraints.txt pins {name} twice"
        pinned[name] = Version(match.group(2))
    return pinned


def requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]]


def test_constraints_pin_every_dependency_within_its_range() -> None:
    pinned = pins()
    assert "memsync" not in pinned
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is not in constraints.txt: run `make constraints`"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside pyproject's {req}: run `make constraints`"
        )


def test_make_install_and_the_image_use_the_constraints() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "pip install --quiet -c constraints.txt -e '.[test]'" in makefile
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"pip install .*-c constraints\.txt \.", dockerfile)
    assert "!constraints.txt" in (REPO / ".dockerignore").read_text().splitlines()


def _make_dry_run(target: str, venv: Path) -> list[str]:
    """The commands ``make TARGET`` would run for a fresh clone (``make -n``: nothing runs)."""
    make = shutil.which("make")
    assert make is not None, "make is needed to check the Makefile"
    done = subprocess.run(
        [make, "-n", "-C", str(REPO), f"VENV={venv}", target],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [
        line for line in done.stdout.splitlines() if "pip install" in line and "--upgrade pip" not in line
    ]


def test_make_dev_installs_the_runtime_only_and_make_test_the_test_extra(tmp_path: Path) -> None:
    venv = tmp_path / "fresh-venv"  # does not exist: make plans the whole install
    assert _make_dry_run("dev", venv) == [f"{venv}/bin/python -m pip install --quiet -c constraints.txt -e ."]
    for target in ("install", "lint", "unit"):
        assert _make_dry_run(target, venv) == [
            f"{venv}/bin/python -m pip install --quiet -c constraints.txt -e '.[test]'"
        ], target


def test_the_license_is_apache_2_as_declared() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"  # an SPDX expression (no setuptools deprecation warning)
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (REPO / "Dockerfile").read_text()


def test_the_version_is_set_in_one_place_and_followed_everywhere() -> None:
    """``memsync.__version__`` is the version: the package metadata reads it, the chart and the overlays'
    image tags follow it, and CHANGELOG.md's newest released section (if any) is it."""
    import yaml

    import memsync

    version = memsync.__version__
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "memsync.__version__"}
    chart = yaml.safe_load((REPO / "charts" / "memsync" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (version, version)
    for overlay in ("production", "namespaced", "store-postgres"):
        kustomization = yaml.safe_load(
            (REPO / "manifests" / "overlays" / overlay / "kustomization.yaml").read_text()
        )
        assert [image["newTag"] for image in kustomization["images"]] == [version], overlay
    releases = re.findall(r"^## \[([^\]]+)\]", (REPO / "CHANGELOG.md").read_text(), flags=re.MULTILINE)
    assert releases[0] == "Unreleased"
    assert releases[1:2] in ([], [version])
