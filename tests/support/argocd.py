"""The Argo CD health check of SessionMemories (manifests/argocd/health.lua) run as Argo CD runs it: Lua 5.1
(lupa's bundled interpreter; Argo CD embeds gopher-lua, a Lua 5.1) with the object as the global ``obj``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lupa import lua51

HEALTH_LUA = Path(__file__).resolve().parents[2] / "manifests" / "argocd" / "health.lua"


def argocd_health(obj: dict[str, Any]) -> tuple[str, str]:
    """(status, message) of the health check for ``obj`` (a SessionMemory as the API serves it)."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(HEALTH_LUA.read_text())
    return str(result["status"]), str(result["message"])
