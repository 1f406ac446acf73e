"""The in-memory Kubernetes objects of ``memsync dev --environment``, with what tests add to them."""

from __future__ import annotations

from datetime import datetime

from memsync.devtools.objects import MemoryObjects


class Objects(MemoryObjects):
    """``MemoryObjects`` plus a way to play the SessionMemory controller's outcome."""

    def finish(self, name: str, phase: str, when: datetime) -> None:
        stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.smems[name]["status"] = {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": stamp}],
        }
