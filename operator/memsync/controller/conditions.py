"""Kubernetes conditions (metav1.Condition conventions), as both of memsync's resources write them.

A SessionMemory (``sessionmemory/derive.py``) and an AgentEnvironment (``environment/decisions.py``) keep
a list of conditions whose ``lastTransitionTime`` moves only when a condition's status flips.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from memsync.contracts.report import MESSAGE_LIMIT
from memsync.crd.status_types import Condition, ConditionStatus


def now_utc() -> datetime:
    """The current time (UTC): the controller's one clock; handlers pass its value into pure functions."""
    return datetime.now(tz=UTC)


def format_time(now: datetime) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes metav1.Time."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Cond:
    type: str
    status: ConditionStatus
    reason: str
    message: str


def merge_conditions(
    previous: Any, wanted: Sequence[Cond], *, generation: int | None, now: datetime | str
) -> list[Condition]:
    """The new condition list: ``lastTransitionTime`` moves only when a condition's status flips.

    Reason and message follow the current state (a Failed mount changes the message of a condition that
    was already False). Conditions of other types (written by someone else) are kept as they are. ``now``
    is a time, or one already written as ``format_time`` writes it.
    """
    before: dict[str, dict[str, Any]] = {}
    others: list[Condition] = []
    wanted_types = {c.type for c in wanted}
    for item in previous if isinstance(previous, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            continue
        if item["type"] in wanted_types:
            before[item["type"]] = item
        else:
            others.append(cast(Condition, dict(item)))
    result: list[Condition] = []
    for cond in wanted:
        old = before.get(cond.type)
        stamp = now if isinstance(now, str) else format_time(now)
        if (
            old is not None
            and old.get("status") == cond.status
            and isinstance(old.get("lastTransitionTime"), str)
        ):
            stamp = old["lastTransitionTime"]
        entry: Condition = {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message[:MESSAGE_LIMIT],
            "lastTransitionTime": stamp,
        }
        if generation is not None:
            entry["observedGeneration"] = generation
        result.append(entry)
    return result + others


def condition(status: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    """One condition of a status, or None."""
    for entry in status.get("conditions") or []:
        if isinstance(entry, dict) and entry.get("type") == type_:
            return entry
    return None


# --------------------------------------------------------------------------------------------------
# Derivation
# --------------------------------------------------------------------------------------------------
