"""Which SessionMemory a Pod belongs to, and which SessionMemory holds a session: pure ownership rules."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from memsync.controller.objects import meta_of
from memsync.crd.models import GROUP, KIND

#: The claims on one session in a namespace (``session_claim`` values), from the operator's index.
Claims = Callable[[str, str], list[Mapping[str, Any]]]


def owner_uid(pod: Mapping[str, Any]) -> str | None:
    """The uid of the SessionMemory that controls ``pod`` (its controller owner reference), if any."""
    for ref in meta_of(pod).owner_references:
        if (
            ref.get("controller") is True
            and ref.get("kind") == KIND
            and str(ref.get("apiVersion", "")).split("/")[0] == GROUP
        ):
            uid = ref.get("uid")
            return str(uid) if uid else None
    return None


def owner_name(pod: Mapping[str, Any]) -> str | None:
    for ref in meta_of(pod).owner_references:
        if ref.get("controller") is True and ref.get("kind") == KIND:
            name = ref.get("name")
            return str(name) if name else None
    return None


def _sort_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = meta_of(obj)
    return (str(meta.creation_timestamp or ""), str(meta.name or ""))


def senior_duplicate(me: Mapping[str, Any], others: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The SessionMemory that holds ``me``'s sessionId in the namespace, when it is not ``me``.

    All SessionMemories with the same ``spec.sessionId`` (including those being deleted, whose Pods may
    still be flushing) are ordered by creationTimestamp, then name; the first one holds the session.
    """
    session_id = (me.get("spec") or {}).get("sessionId")
    my_uid = meta_of(me).uid
    if not session_id:
        return None
    same = [o for o in others if (o.get("spec") or {}).get("sessionId") == session_id]
    if not any(meta_of(o).uid == my_uid for o in same):
        same.append(me)
    same.sort(key=_sort_key)
    first = same[0]
    return None if meta_of(first).uid == my_uid else first


def session_claim(obj: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]] | None:
    """The SessionMemory's entry in the operator's index of sessions: (namespace, sessionId) -> a claim.

    The claim keeps only what ``senior_duplicate`` orders by (name, uid, creationTimestamp), so the index
    costs a few hundred bytes per object, and the duplicate check reads no listing from the API.
    """
    meta = meta_of(obj)
    session_id = (obj.get("spec") or {}).get("sessionId")
    if not isinstance(session_id, str) or not session_id or not meta.namespace:
        return None
    keep = ("name", "namespace", "uid", "creationTimestamp")
    claim = {"metadata": {k: v for k, v in meta.raw.items() if k in keep}, "spec": {"sessionId": session_id}}
    return {(meta.namespace, session_id): claim}
