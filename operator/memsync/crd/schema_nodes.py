"""The building blocks of the CRDs' OpenAPI schemas: typed nodes and CEL rules (x-kubernetes-validations)."""

from __future__ import annotations

from typing import Any

from memsync.contracts.report import SAMPLE_MAX


def rule(cel: str, message: str, *, reason: str = "FieldValueInvalid", field_path: str | None = None) -> Any:
    """One CEL rule of ``x-kubernetes-validations``."""
    out: dict[str, Any] = {"rule": cel, "message": message, "reason": reason}
    if field_path:
        out["fieldPath"] = field_path
    return out


def string_node(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def count_node(description: str) -> dict[str, Any]:
    return {"type": "integer", "format": "int64", "minimum": 0, "description": description}


def paths_node(description: str) -> dict[str, Any]:
    return {
        "type": "array",
        "description": description,
        "maxItems": SAMPLE_MAX,
        "items": {"type": "string", "maxLength": 1024},
    }


def open_object(description: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "x-kubernetes-preserve-unknown-fields": True,
        **extra,
    }


def add_validations(node: dict[str, Any], *rules: Any) -> None:
    node.setdefault("x-kubernetes-validations", []).extend(rules)


def forbidden(cel: str, message: str, field: str | None = None) -> Any:
    """A rule refusing what ``cel`` does not allow (``FieldValueForbidden``), at ``field`` when given."""
    return rule(cel, message, reason="FieldValueForbidden", field_path=f".{field}" if field else None)
