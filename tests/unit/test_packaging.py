"""Packaging hygiene: the license is the one pyproject declares, and constraints.txt pins every dependency
(runtime and test) at a version pyproject allows, and is what make install and the image install with."""

from __future__ import annotations

import re
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


def test_the_license_is_apache_2_as_declared() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (REPO / "Dockerfile").read_text()
