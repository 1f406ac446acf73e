"""The stores JSON of ``MEMSYNC_STORES`` (``memsync.contracts.env`` names the variable and the access)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from memsync.contracts.env import Access


class StoreEntry(BaseModel):
    """One attached store as ``MEMSYNC_STORES`` lists it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    memory_store_id: str
    name: str = ""
    mount_path: str = ""
    access: Access = "read_write"


def encode_stores(stores: Sequence[StoreEntry]) -> str:
    """``MEMSYNC_STORES``: a compact JSON array of the entries."""
    return json.dumps([s.model_dump(mode="json") for s in stores], separators=(",", ":"), ensure_ascii=False)
