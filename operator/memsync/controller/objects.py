"""A typed, read-only view of a Kubernetes object's ``metadata``.

The controller keeps objects as the plain camelCase dicts the API serves; this view reads the few metadata
fields it needs by name and type, so no handler spells ``(obj.get("metadata") or {}).get(...)``. A field that
is absent (or of the wrong type) reads as None, or as an empty tuple for the owner references.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class _Text:
    """A metadata field read as a string (None when absent or not a string)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __get__(self, view: ObjectMeta, owner: type | None = None) -> str | None:
        value = view.raw.get(self.key)
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class ObjectMeta:
    raw: Mapping[str, Any]

    name = _Text("name")
    namespace = _Text("namespace")
    uid = _Text("uid")
    resource_version = _Text("resourceVersion")
    creation_timestamp = _Text("creationTimestamp")
    deletion_timestamp = _Text("deletionTimestamp")

    @property
    def generation(self) -> int | None:
        value = self.raw.get("generation")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def deletion_grace_period_seconds(self) -> Any:
        return self.raw.get("deletionGracePeriodSeconds")

    @property
    def owner_references(self) -> tuple[Mapping[str, Any], ...]:
        refs = self.raw.get("ownerReferences") or []
        return tuple(ref for ref in refs if isinstance(ref, Mapping))

    def reference(self) -> dict[str, Any]:
        """``name``, ``namespace`` and ``uid`` as present: the metadata of an Event's involved object."""
        return {k: v for k, v in self.raw.items() if k in ("name", "namespace", "uid")}


def meta_of(obj: Mapping[str, Any]) -> ObjectMeta:
    """The metadata view of ``obj`` (an empty view when the object has none)."""
    raw = obj.get("metadata")
    return ObjectMeta(raw if isinstance(raw, Mapping) else {})
