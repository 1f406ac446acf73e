"""docs/crd-reference.md is generated from the committed CRDs and stays equal to them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memsync.crd.reference import MAX_DEPTH, load_crds, render_crd, render_reference

ROOT = Path(__file__).resolve().parents[2]


def _committed_crds() -> list[dict[str, Any]]:
    return load_crds(sorted((ROOT / "crds").glob("*.yaml")))


def test_reference_doc_is_current() -> None:
    committed = (ROOT / "docs" / "crd-reference.md").read_text(encoding="utf-8")
    assert committed == render_reference(_committed_crds()), "docs/crd-reference.md is stale: run `make crds`"


def test_every_crd_is_documented() -> None:
    crds = _committed_crds()
    assert crds, "no CRD found under crds/"
    text = render_reference(crds)
    for crd in crds:
        assert f"## {crd['spec']['names']['kind']}" in text


def _field(name: str, node: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "description": f"the {name}", "properties": {name: node}}


def test_rows_carry_type_bounds_required_and_rules() -> None:
    leaf = {"type": "integer", "minimum": 1, "maximum": 9, "default": 3, "description": "a count"}
    spec = {
        "type": "object",
        "required": ["count"],
        "properties": {
            "count": leaf,
            "mode": {"type": "string", "enum": ["a", "b"]},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "items": {
                "type": "array",
                "maxItems": 4,
                "items": {"type": "object", "properties": {"id": {"type": "string", "maxLength": 8}}},
                "x-kubernetes-validations": [{"rule": "true", "message": "ids are unique"}],
            },
        },
    }
    crd = {
        "spec": {
            "group": "example.dev",
            "scope": "Namespaced",
            "names": {"kind": "Thing", "singular": "thing", "plural": "things", "shortNames": ["th"]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"properties": {"spec": spec}}},
                }
            ],
        }
    }
    text = "\n".join(render_crd(crd))
    assert "`example.dev/v1`, Namespaced; plural `things`, short names `th` (storage version)." in text
    assert "| `spec.count` | integer | ≥ 1; ≤ 9; default `3` | **Required.** a count |" in text
    assert "| `spec.mode` | string | one of `a`, `b` |" in text
    assert "| `spec.labels` | map[string]string |" in text
    assert "| `spec.items[].id` | string | length ≤ 8 |" in text
    assert "- `spec.items`: ids are unique" in text


def test_deep_objects_point_to_kubectl_explain() -> None:
    node: dict[str, Any] = {"type": "string"}
    names = [f"level{i}" for i in range(MAX_DEPTH + 2)]
    for name in reversed(names):
        node = _field(name, node)
    crd = {
        "spec": {
            "group": "example.dev",
            "scope": "Namespaced",
            "names": {"kind": "Deep", "singular": "deep", "plural": "deeps"},
            "versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"properties": {"spec": node}}}}],
        }
    }
    text = "\n".join(render_crd(crd))
    pointer_path = "spec." + ".".join(names[:MAX_DEPTH])
    assert f"`kubectl explain deep.{pointer_path}`" in text
    assert f"| `{pointer_path}.{names[MAX_DEPTH]}`" not in text
    assert f"| `{pointer_path}` | object |" in text
