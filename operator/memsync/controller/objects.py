"""A typed, read-only view of a Kubernetes object's ``metadata``.

The controller keeps objects as the plain camelCase dicts the API serves; this view reads the few metadata
fields it needs by name and type, so no handler spells ``(obj.get("metadata") or {}).get(...)``. A field that
is absent (or of the wrong type) reads as None, or as an empty tuple for the owner references.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple


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


class ObjectRef(NamedTuple):
    """Which object: its namespace, name and uid (the one name for an object's key in the controller).

    The operator's per-object memory is kept by (namespace, name), the periodic jobs and the Pod watcher hand
    an ``ObjectRef`` on, and a step that reads the object afresh needs no more than ``as_body``.
    """

    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        meta = meta_of(obj)
        return cls(str(meta.namespace or ""), str(meta.name or ""), str(meta.uid or ""))

    def as_body(self, api_version: str, kind: str) -> dict[str, Any]:
        """The object's identity as a body: kind, name, namespace and uid (when known)."""
        metadata = {"namespace": self.namespace, "name": self.name}
        if self.uid:
            metadata["uid"] = self.uid
        return {"apiVersion": api_version, "kind": kind, "metadata": metadata}
