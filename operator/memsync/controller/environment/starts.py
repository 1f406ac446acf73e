"""Sessions of an environment that have not started yet, as pure decisions: whether one waits for a quota
(no new item is claimed then), and how long a hold resumed from an earlier leader may last (the start
deadline of its SessionMemory)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from memsync.controller.objects import meta_of
from memsync.controller.sessionmemory.phases import QUOTA_EXCEEDED, TERMINAL_PHASES
from memsync.crd.models import CONDITION_READY


def phase_of(smem: Mapping[str, Any]) -> str | None:
    phase = (smem.get("status") or {}).get("phase")
    return phase if isinstance(phase, str) else None


def ready_reason(smem: Mapping[str, Any]) -> str | None:
    for cond in (smem.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == CONDITION_READY:
            reason = cond.get("reason")
            return reason if isinstance(reason, str) else None
    return None


def waits_for_quota(smems: Sequence[Mapping[str, Any]]) -> bool:
    """Whether one of the SessionMemories waits for a ResourceQuota or a LimitRange (``QuotaExceeded``)."""
    return any(
        phase_of(s) not in TERMINAL_PHASES
        and meta_of(s).deletion_timestamp is None
        and ready_reason(s) == QUOTA_EXCEEDED
        for s in smems
    )


def resumed_hold_deadline(smem: Mapping[str, Any] | None, default_s: float, now: datetime) -> float | None:
    """Seconds left to the start deadline of a hold resumed from an earlier leader: from the SessionMemory's
    creation, its own ``startDeadlineSeconds`` (else ``default_s``); None once its sandbox ran (the runner
    takes the lease over), it ended, or there is no SessionMemory to tell."""
    if smem is None or phase_of(smem) in ("Running", "Flushing", *TERMINAL_PHASES):
        return None
    created = meta_of(smem).creation_timestamp
    if not isinstance(created, str):
        return None
    seconds = (smem.get("spec") or {}).get("startDeadlineSeconds")
    limit = float(seconds) if isinstance(seconds, int) and not isinstance(seconds, bool) else default_s
    start = datetime.fromisoformat(created.replace("Z", "+00:00"))
    return max(0.0, (start + timedelta(seconds=limit) - now).total_seconds())
