"""``memsync session run``: the session runner in an environment's sandbox Pod.

It serves the one work item the operator claimed for this Pod with the official SDK's per-item worker (its
heartbeat, its session tool runner, its force-stop), with the SDK's own memory handling off: the memory
stores are already mounted and kept in sync by the memsync sidecar. The agent's file tools are confined to
the mounted stores (the read-only ones refuse writes). When the session ends, a cleanup hook asks the
sidecar for the final sync and flush and waits for its report, while the heartbeat still holds the lease;
only after that does the worker stop the item. The environment it reads is defined in
``memsync.contracts.runner``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anthropic
import httpx
from anthropic.lib.environments import EnvironmentWorker
from anthropic.lib.tools import ToolError, beta_async_tool
from anthropic.lib.tools.agent_toolset import AgentToolContext, beta_agent_toolset_20260401

from memsync.contracts import env, runner
from memsync.contracts.stores import StoreEntry
from memsync.session.takeover import runner_http_client

logger = logging.getLogger("memsync.session")

#: The name the cleanup hook is registered under among the tools; no agent is ever given it.
HOOK_TOOL_NAME: Final = "memsync_final_flush_hook"
DEFAULT_FINAL_TIMEOUT_S: Final = 120.0
RETRY_S: Final = 1.0


class RunnerConfigError(ValueError):
    """The runner's environment is incomplete or malformed; the message names the variable."""


@dataclass(frozen=True)
class RunnerConfig:
    work_id: str
    environment_id: str
    session_id: str
    stores: tuple[StoreEntry, ...]
    sidecar_url: str | None
    workdir: Path

    @property
    def roots(self) -> list[Path]:
        return [Path(s.mount_path) for s in self.stores]

    @property
    def read_only_roots(self) -> list[Path]:
        return [Path(s.mount_path) for s in self.stores if s.access == "read_only"]


def config_from_env(environ: Mapping[str, str], workdir: Path) -> RunnerConfig:
    """The runner's configuration from its environment (``contracts.runner``); the SDK reads the secret."""
    missing = [
        n
        for n in (runner.WORK_ID, runner.ENVIRONMENT_ID, runner.SESSION_ID, runner.WORK_SECRET)
        if not environ.get(n)
    ]
    if missing:
        raise RunnerConfigError(
            f"{', '.join(missing)} must be set: the operator sets them on the sandbox container"
        )
    try:
        raw = json.loads(environ.get(runner.STORES) or "[]")
        stores = tuple(StoreEntry.model_validate(s) for s in raw)
    except ValueError as exc:
        raise RunnerConfigError(f"{runner.STORES} is not the stores JSON list: {exc}") from None
    for s in stores:
        if not s.mount_path.startswith("/"):
            raise RunnerConfigError(f"{runner.STORES}: store {s.memory_store_id} has no absolute mount_path")
    port = environ.get(runner.SIDECAR_PORT, "")
    if port and not port.isdigit():
        raise RunnerConfigError(f"{runner.SIDECAR_PORT} must be a port number, got {port!r}")
    # test-only: memsync's processes resolve absolute configured paths under this root (never set in a Pod)
    test_root = environ.get(env.TEST_ROOT)
    if test_root:
        stores = tuple(s.model_copy(update={"mount_path": test_root + s.mount_path}) for s in stores)
    return RunnerConfig(
        work_id=environ[runner.WORK_ID],
        environment_id=environ[runner.ENVIRONMENT_ID],
        session_id=environ[runner.SESSION_ID],
        stores=stores,
        sidecar_url=f"http://127.0.0.1:{port}" if port else None,
        workdir=workdir,
    )


async def request_final_flush(sidecar_url: str, timeout_s: float) -> dict[str, Any] | None:
    """Ask the sidecar for the final sync and flush and wait for its report (retrying while it does not
    answer yet); None when no report came within ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with httpx.AsyncClient(base_url=sidecar_url, timeout=timeout_s) as http:
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return None
            try:
                response = await http.post(runner.FINAL_PATH, timeout=left)
                response.raise_for_status()
                report: dict[str, Any] = response.json()
                return report
            except (httpx.HTTPError, ValueError) as exc:
                logger.warning(
                    "the sidecar did not answer the final flush request yet", extra={"error": str(exc)}
                )
                await asyncio.sleep(min(RETRY_S, max(0.0, left)))


def final_flush_hook(config: RunnerConfig, timeout_s: float) -> Any:
    """A tool that does nothing when called and, on the runner's exit, runs the final flush request."""

    @beta_async_tool(name=HOOK_TOOL_NAME)
    async def hook() -> str:
        """Not a tool for the agent: memsync's end-of-session hook."""
        raise ToolError(f"{HOOK_TOOL_NAME} is not a tool")

    async def aclose() -> None:
        if config.sidecar_url is None:
            logger.warning("no sidecar to ask for the final flush", extra={"work_id": config.work_id})
            return
        logger.info(
            "session ended: asking the sidecar for the final sync and flush",
            extra={"work_id": config.work_id},
        )
        report = await request_final_flush(config.sidecar_url, timeout_s)
        if report is None:
            logger.error(
                "the sidecar's final flush did not report in time", extra={"work_id": config.work_id}
            )
        elif report.get("complete") is False:
            logger.error(
                "the final flush left changed files unsaved",
                extra={"work_id": config.work_id, "report": report},
            )
        else:
            logger.info("final sync and flush done", extra={"work_id": config.work_id})

    hook.aclose = aclose  # type: ignore[attr-defined]
    return hook


def tools_factory(config: RunnerConfig, timeout_s: float) -> Callable[[AgentToolContext], Sequence[Any]]:
    def tools(ctx: AgentToolContext) -> Sequence[Any]:
        ctx.allowed_roots = config.roots
        ctx.read_only_roots = config.read_only_roots
        return [*beta_agent_toolset_20260401(ctx), final_flush_hook(config, timeout_s)]

    return tools


async def run_session(
    config: RunnerConfig,
    *,
    base_url: str | None = None,
    max_idle: float | None = 60.0,
    final_timeout_s: float = DEFAULT_FINAL_TIMEOUT_S,
    work_secret: str | None = None,
) -> None:
    """Serve the work item to its end: the SDK worker's per-item flow, with memsync's tools and hook, over
    the transport that takes the lease over from the operator (``session/takeover.py``). ``base_url``: None
    reads ``ANTHROPIC_BASE_URL`` (the SDK's own default)."""
    client = anthropic.AsyncAnthropic(base_url=base_url, http_client=runner_http_client(config.work_id))
    worker = EnvironmentWorker(
        client,
        workdir=config.workdir,
        memory_sync_interval=None,
        max_idle=max_idle,
        tools=tools_factory(config, final_timeout_s),
    )
    logger.info(
        "serving the work item",
        extra={"work_id": config.work_id, "session_id": config.session_id, "stores": len(config.stores)},
    )
    try:
        await worker.handle_item(
            work_id=config.work_id,
            environment_id=config.environment_id,
            session_id=config.session_id,
            work_secret=work_secret,  # None: the SDK reads ANTHROPIC_WORK_SECRET
        )
    finally:
        await client.close()
