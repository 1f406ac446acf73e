"""Fixtures of the operator tier (kopf against kmock's emulator); the helpers live in ``smem_harness``."""

from __future__ import annotations

from typing import Any

import kmock as km
import pytest
from smem_harness import Cluster, MemsyncEmulator, declare_resources


@pytest.fixture
def kmock_options(kmock_options: dict[str, Any]) -> dict[str, Any]:
    """Every test gets its own MemsyncEmulator on a free loopback port (xdist-safe)."""
    kmock_options["cls"] = MemsyncEmulator
    return kmock_options


@pytest.fixture
async def cluster(kmock: km.KubernetesEmulator) -> Cluster:
    declare_resources(kmock)
    return Cluster(kmock)
