"""Generate ``memsync/crd/core_v1.json``: the Kubernetes core/v1 types the sandbox Pod template embeds.

The SessionMemory CRD types ``spec.template`` with the schema of the pinned Kubernetes version, generated from
its published OpenAPI v3 document (``api/openapi-spec/v3/api__v1_openapi.json`` of the ``k8s.io/kubernetes``
module), never copied by hand. This script reads that document, inlines every ``$ref`` below the types the
template uses, keeps every description (so ``kubectl explain`` documents every field) and rewrites the result
as a CRD structural schema:

* ``IntOrString`` and ``Quantity`` become ``x-kubernetes-int-or-string`` (a Quantity also gets its pattern);
* defaults are dropped (the API server defaults the Pod, not the SessionMemory), as are the strategic-merge
  annotations a CRD schema cannot carry;
* a ``x-kubernetes-list-type: map`` whose keys are not all required becomes a plain (atomic) list, since a
  CRD's map keys must be required.

The output holds the PodSpec fields the template offers (:data:`POD_FIELDS`, with ``containers`` fully
typed and ``volumes`` limited to :data:`VOLUME_SOURCES`), the ObjectMeta fields (:data:`META_FIELDS`) and
``ResourceRequirements`` (the memsync containers' resources). Regenerate with::

    python -m memsync.devtools.core_schema            # or: make core-schema

``tests/unit/test_core_schema.py`` checks the committed file is what this script writes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

from memsync.controller.sessionmemory.pod import TEMPLATE_POD_FIELDS

#: The Kubernetes release whose core/v1 schema the template embeds (tests/cluster/controlplane pins it too).
KUBERNETES_MODULE: Final = "k8s.io/kubernetes"
KUBERNETES_VERSION: Final = "v1.36.3"
SOURCE_PATH: Final = "api/openapi-spec/v3/api__v1_openapi.json"
OUTPUT: Final = Path(__file__).resolve().parents[1] / "crd" / "core_v1.json"

_CORE: Final = "io.k8s.api.core.v1."
_REF_PREFIX: Final = "#/components/schemas/"
_QUANTITY: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING: Final = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
#: A resource quantity, as the API server parses it (the pattern Kubernetes' own CRD tooling emits).
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)"
    r"|(\.[0-9]+))))?$"
)

#: The PodSpec fields of the template (the operator owns every other one).
# The sandbox container, its volumes, the fields the operator copies into the Pod, and the host namespaces
# (declared so that the CRD can refuse them by name rather than prune them).
POD_FIELDS: Final = ("containers", "volumes", *TEMPLATE_POD_FIELDS, "hostNetwork", "hostPID", "hostIPC")
META_FIELDS: Final = ("labels", "annotations")
#: The volume sources the restricted Pod Security Standard allows, and hostPath (declared so that the CRD can
#: refuse it by name rather than prune it).
VOLUME_SOURCES: Final = (
    "name",
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
    "hostPath",
)
_KEEP: Final = {
    "type",
    "format",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
}


class _Inliner:
    def __init__(self, schemas: dict[str, Any]) -> None:
        self.schemas = schemas

    def named(self, name: str, stack: tuple[str, ...] = ()) -> dict[str, Any]:
        if name in stack:
            raise ValueError(f"recursive type {' -> '.join((*stack, name))}: a CRD schema cannot inline it")
        if name == _QUANTITY:
            return {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
                "pattern": QUANTITY_PATTERN,
            }
        if name == _INT_OR_STRING:
            return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
        raw = self.schemas[name]
        if name == _OBJECT_META:  # embedded metadata (a PVC template's): its labels and annotations
            raw = {**raw, "properties": {f: raw["properties"][f] for f in META_FIELDS}}
        return self.node(raw, (*stack, name))

    def node(self, raw: dict[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        refs = [raw["$ref"]] if "$ref" in raw else [r["$ref"] for r in raw.get("allOf", []) if "$ref" in r]
        for ref in refs:
            out.update(self.named(ref.removeprefix(_REF_PREFIX), stack))
        for key, value in raw.items():
            if key not in _KEEP:
                continue
            if key == "properties":
                out[key] = {name: self.node(sub, stack) for name, sub in sorted(value.items())}
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                out[key] = self.node(value, stack)
            else:
                out[key] = value
        if out.get("x-kubernetes-list-type") == "map":
            required = set(out["items"].get("required", []))
            if not set(out.get("x-kubernetes-list-map-keys", [])) <= required:
                del out["x-kubernetes-list-type"], out["x-kubernetes-list-map-keys"]
        if out.get("type") == "object" and not ({"properties", "additionalProperties"} & set(out)):
            raise ValueError(f"{'/'.join(stack)}: an object without properties would need preserve-unknown")
        return out


def generate(document: dict[str, Any]) -> dict[str, Any]:
    """The committed JSON for one OpenAPI v3 document of core/v1."""
    schemas = document["components"]["schemas"]
    inline = _Inliner(schemas)
    pod = schemas[_CORE + "PodSpec"]
    pod_spec = inline.node(
        {
            "type": "object",
            "properties": {f: pod["properties"][f] for f in POD_FIELDS},
        },
        (),
    )
    volume = pod_spec["properties"]["volumes"]["items"]
    volume["properties"] = {k: v for k, v in volume["properties"].items() if k in VOLUME_SOURCES}
    return {
        "source": f"{KUBERNETES_MODULE}@{KUBERNETES_VERSION}/{SOURCE_PATH}",
        "podSpec": pod_spec,
        "objectMeta": inline.named(_OBJECT_META),
        "resourceRequirements": inline.named(_CORE + "ResourceRequirements"),
    }


def render(document: dict[str, Any]) -> str:
    return json.dumps(generate(document), indent=1, sort_keys=True) + "\n"


def default_source() -> Path:
    """The document in the Go module cache (``go mod download k8s.io/kubernetes@<version>`` puts it there)."""
    cache = os.environ.get("GOMODCACHE")
    if not cache:
        try:
            cache = subprocess.run(
                ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            cache = str(Path.home() / "go" / "pkg" / "mod")
    return Path(cache) / f"{KUBERNETES_MODULE}@{KUBERNETES_VERSION}" / SOURCE_PATH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None, help="the OpenAPI v3 document of core/v1")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    source: Path = args.source or default_source()
    if not source.is_file():
        sys.stderr.write(
            f"{source} not found: run `go mod download {KUBERNETES_MODULE}@{KUBERNETES_VERSION}` first\n"
        )
        return 1
    args.output.write_text(render(json.loads(source.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
