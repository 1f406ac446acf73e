"""A typed, read-only view of a Kubernetes object's ``metadata``.

The controller keeps objects as the plain camelCase dicts the API serves; this view reads the few metadata
fields it needs by name and type, so no handler spells ``(obj.get("metadata") or {}).get(...)``. A field that
is absent (or of the wrong type) reads as None, or as an empty tuple for the owner references.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ObjectMeta:
    raw: Mapping[str, Any]

    def _text(self, key: str) -> str | None:
        value = self.raw.get(key)
        return value if isinstance(value, str) else None

    @property
    def name(self) -> str | None:
        return self._text("name")

    @property
    def namespace(self) -> str | None:
        return self._text("namespace")

    @property
    def uid(self) -> str | None:
        return self._text("uid")

    @property
    def resource_version(self) -> str | None:
        return self._text("resourceVersion")

    @property
    def creation_timestamp(self) -> str | None:
        return self._text("creationTimestamp")

    @property
    def deletion_timestamp(self) -> str | None:
        return self._text("deletionTimestamp")

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
