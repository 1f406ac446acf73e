"""The CRD reference in Markdown, generated from the CustomResourceDefinitions themselves.

``docs/crd-reference.md`` is this module's output for the CRDs committed under ``crds/``; a test keeps the
two equal, so the reference cannot drift from the schema the API server enforces. Regenerate it with::

    python -m memsync.crd.reference crds/*.agents.memsync.dev.yaml > docs/crd-reference.md   # or: make crds

Every field is listed with its type, constraints and description, down to ``MAX_DEPTH`` levels below
``spec`` and ``status``. Deeper objects (the Kubernetes core types the sandbox template embeds) are named
with a pointer to ``kubectl explain``, which shows them in full from the same schema.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

MAX_DEPTH: Final = 4
_BOUNDS: Final = (
    ("minimum", "≥ {}"),
    ("maximum", "≤ {}"),
    ("minLength", "length ≥ {}"),
    ("maxLength", "length ≤ {}"),
    ("minItems", "≥ {} items"),
    ("maxItems", "≤ {} items"),
    ("maxProperties", "≤ {} entries"),
    ("pattern", "matches `{}`"),
    ("format", "format {}"),
)


def _type(node: Mapping[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = str(node.get("type", "any"))
    if kind == "array":
        return f"[]{_type(node.get('items', {}))}"
    if kind == "object" and "additionalProperties" in node and "properties" not in node:
        values = node["additionalProperties"]
        return f"map[string]{_type(values) if isinstance(values, Mapping) else 'any'}"
    return kind


def _constraints(node: Mapping[str, Any]) -> str:
    parts = [template.format(node[key]) for key, template in _BOUNDS if key in node]
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{value}`" for value in node["enum"]))
    if "default" in node:
        parts.append(f"default `{json.dumps(node['default'], separators=(',', ':'))}`")
    if node.get("x-kubernetes-preserve-unknown-fields"):
        parts.append("free-form")
    return "; ".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _rows(
    node: Mapping[str, Any], path: str, depth: int, explain: str
) -> Iterator[tuple[str, str, str, str]]:
    """(field path, type, constraints, description) for every field below ``node``, depth first."""
    if node.get("type") == "array":
        node = node.get("items", {})
        path += "[]"
    properties: Mapping[str, Any] = node.get("properties", {})
    required = set(node.get("required", ()))
    for name, child in properties.items():
        child_path = f"{path}.{name}"
        described = str(child.get("description", ""))
        if name in required:
            described = f"**Required.** {described}"
        inner = child.get("items", child) if child.get("type") == "array" else child
        nested = bool(inner.get("properties"))
        if nested and depth >= MAX_DEPTH:
            described += f" (Every field: `kubectl explain {explain}{child_path.replace('[]', '')}`.)"
            nested = False
        yield child_path, _type(child), _constraints(child), described
        if nested:
            yield from _rows(child, child_path, depth + 1, explain)


def _rules(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, str]]:
    """(field path, message) of every CEL rule, depth first."""
    for rule in node.get("x-kubernetes-validations", ()):
        yield path or ".", str(rule.get("message", rule.get("rule", "")))
    inner = node.get("items") if node.get("type") == "array" else None
    if isinstance(inner, Mapping):
        yield from _rules(inner, path + "[]")
    for name, child in node.get("properties", {}).items():
        yield from _rules(child, f"{path}.{name}")


def render_crd(crd: Mapping[str, Any]) -> list[str]:
    names = crd["spec"]["names"]
    group = crd["spec"]["group"]
    kind = names["kind"]
    explain = str(names["singular"])
    lines = [f"## {kind}", ""]
    short = ", ".join(f"`{alias}`" for alias in names.get("shortNames", ()))
    for version in crd["spec"]["versions"]:
        if not version.get("served", True):
            continue
        lines += [
            f"`{group}/{version['name']}`, {crd['spec']['scope']}; plural `{names['plural']}`"
            + (f", short names {short}" if short else "")
            + (" (storage version)." if version.get("storage") else "."),
            "",
        ]
        columns = version.get("additionalPrinterColumns", ())
        if columns:
            lines += ["`kubectl get` columns (`-o wide` adds those marked wide):", ""]
            lines += ["| column | type | from | |", "|---|---|---|---|"]
            for column in columns:
                wide = "wide" if column.get("priority", 0) else ""
                lines.append(
                    f"| {column['name']} | {column['type']} | `{_cell(column['jsonPath'])}` | {wide} |"
                )
            lines.append("")
        schema = version["schema"]["openAPIV3Schema"]
        for part in ("spec", "status"):
            node = schema.get("properties", {}).get(part)
            if not node:
                continue
            lines += [f"### `{kind}.{part}` ({version['name']})", ""]
            if node.get("description"):
                lines += [_cell(str(node["description"])), ""]
            lines += ["| field | type | constraints | description |", "|---|---|---|---|"]
            for path, kind_, bounds, described in _rows(node, part, 1, explain + "."):
                lines.append(f"| `{path}` | {_cell(kind_)} | {_cell(bounds)} | {_cell(described)} |")
            lines.append("")
            rules = list(_rules(node, part))
            if rules:
                lines += [f"Checked at apply (CEL rules on `{part}`):", ""]
                lines += [f"- `{path}`: {_cell(message)}" for path, message in rules]
                lines.append("")
    return lines


def render_reference(crds: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "# CRD reference",
        "",
        "<!-- generated by `python -m memsync.crd.reference` from the CRDs in crds/; do not edit -->",
        "",
        "Every field of memsync's custom resources as the API server validates them. The same text is what",
        "`kubectl explain` prints on a cluster where the CRDs are installed.",
        "",
    ]
    for crd in sorted(crds, key=lambda c: str(c["spec"]["names"]["kind"])):
        lines += render_crd(crd)
    return "\n".join(lines).rstrip("\n") + "\n"


def load_crds(paths: Sequence[Path]) -> list[dict[str, Any]]:
    crds: list[dict[str, Any]] = []
    for path in paths:
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                crds.append(document)
    return crds


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python -m memsync.crd.reference CRD.yaml [...]", file=sys.stderr)
        return 2
    sys.stdout.write(render_reference(load_crds([Path(arg) for arg in argv])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
