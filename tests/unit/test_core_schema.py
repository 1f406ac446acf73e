"""The generated core/v1 schema of the sandbox Pod template: current, embedded in the CRD, described."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memsync.crd import core
from memsync.crd.schema import build_crd
from memsync.devtools import core_schema as gen

GENERATED = gen.OUTPUT


def _template() -> dict[str, Any]:
    version = build_crd()["spec"]["versions"][0]
    node: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "template"
    ]
    return node


def test_generated_file_is_current() -> None:
    source = gen.default_source()
    if not source.is_file():
        # The control plane tier pins the same module; fetch it here when Go can (only its absence skips).
        if shutil.which("go") is None:
            pytest.skip(f"Go is not installed: {source} cannot be fetched (`go mod download`)")
        module = f"{gen.KUBERNETES_MODULE}@{gen.KUBERNETES_VERSION}"
        subprocess.run(["go", "mod", "download", module], check=True, timeout=900, capture_output=True)
        source = gen.default_source()
    assert GENERATED.read_text() == gen.render(json.loads(source.read_text())), (
        "operator/memsync/crd/core_v1.json is stale: run `python -m memsync.devtools.core_schema`"
    )


def test_the_pinned_version_is_the_control_planes() -> None:
    go_mod = Path(__file__).resolve().parents[1] / "cluster" / "controlplane" / "kubernetes" / "go.mod"
    assert f"require k8s.io/kubernetes {gen.KUBERNETES_VERSION}\n" in go_mod.read_text()
    assert core.source() == f"k8s.io/kubernetes@{gen.KUBERNETES_VERSION}/{gen.SOURCE_PATH}"


def test_the_crd_embeds_the_generated_types() -> None:
    generated = json.loads(GENERATED.read_text())["podSpec"]["properties"]
    spec = _template()["properties"]["spec"]["properties"]
    for field in gen.POD_FIELDS:
        assert spec[field]["description"].endswith(generated[field]["description"]), field
    container = spec["containers"]["items"]["properties"]
    assert set(container) == set(generated["containers"]["items"]["properties"])
    # nested types are inlined whole: the probe's httpGet port is IntOrString, a resource a Quantity
    probe = container["readinessProbe"]["properties"]["httpGet"]["properties"]["port"]
    assert probe["x-kubernetes-int-or-string"] is True
    limits = container["resources"]["properties"]["limits"]["additionalProperties"]
    assert limits["pattern"] == gen.QUANTITY_PATTERN
    volume = spec["volumes"]["items"]["properties"]
    assert set(volume) == set(gen.VOLUME_SOURCES)
    assert "hostPath" in volume and "nfs" not in volume


def _walk(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for key, sub in (node.get("properties") or {}).items():
        out += _walk(sub, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            out += _walk(node[key], f"{path}.{key}")
    return out


def test_every_template_field_is_described_for_kubectl_explain() -> None:
    undescribed = [
        path
        for path, node in _walk(_template(), "template")
        if path.count(".")
        and not path.endswith((".items", ".additionalProperties"))
        and not node.get("description")
    ]
    assert undescribed == []


# --- the generator on small documents -----------------------------------------------------------------------


def _doc(**schemas: Any) -> dict[str, Any]:
    return {"components": {"schemas": schemas}}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **extra}


def test_refs_are_inlined_with_the_fields_description() -> None:
    b_field = {"allOf": [_ref("B")], "description": "the b", "default": {}}
    inline = gen._Inliner(
        {
            "A": _object({"b": b_field}, description="type A"),
            "B": _object({"n": {"type": "integer", "format": "int32"}}, description="type B"),
        }
    )
    a = inline.named("A")
    assert a["properties"]["b"] == {
        "type": "object",
        "description": "the b",
        "properties": {"n": {"type": "integer", "format": "int32"}},
    }


INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def _map_list(keys: list[str]) -> dict[str, Any]:
    return {
        "type": "array",
        "items": _ref("P"),
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": keys,
        "x-kubernetes-patch-strategy": "merge",
    }


def test_int_or_string_quantity_and_map_lists() -> None:
    port = {"type": "integer"}
    protocol = {"type": "string", "default": "TCP"}
    inline = gen._Inliner(
        {
            INT_OR_STRING: {"type": "string", "format": "int-or-string"},
            QUANTITY: {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "P": _object({"port": port, "protocol": protocol}, required=["port"]),
            "C": _object(
                {
                    "port": {"allOf": [_ref(INT_OR_STRING)]},
                    "memory": _ref(QUANTITY),
                    "byPort": _map_list(["port"]),
                    "byBoth": _map_list(["port", "protocol"]),
                }
            ),
        }
    )
    c = inline.named("C")["properties"]
    assert c["port"] == {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }
    assert (
        c["memory"]["x-kubernetes-int-or-string"] is True and c["memory"]["pattern"] == gen.QUANTITY_PATTERN
    )
    assert c["byPort"]["x-kubernetes-list-type"] == "map"
    assert "x-kubernetes-patch-strategy" not in c["byPort"]
    # a map key that is not required (protocol only has a default) cannot key a CRD list: a plain list
    assert "x-kubernetes-list-type" not in c["byBoth"]
    assert "default" not in c["byBoth"]["items"]["properties"]["protocol"]


def test_recursion_and_open_objects_are_refused() -> None:
    with pytest.raises(ValueError, match="recursive type"):
        gen._Inliner({"R": {"type": "object", "properties": {"r": _ref("R")}}}).named("R")
    with pytest.raises(ValueError, match="preserve-unknown"):
        gen._Inliner({"O": {"type": "object", "description": "raw"}}).named("O")


def test_main_says_where_to_get_the_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gen.main(["--source", str(tmp_path / "missing.json"), "--output", str(tmp_path / "o.json")]) == 1
    assert not (tmp_path / "o.json").exists()
    assert f"go mod download k8s.io/kubernetes@{gen.KUBERNETES_VERSION}" in capsys.readouterr().err
