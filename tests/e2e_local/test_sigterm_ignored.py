"""A sandbox whose PID 1 ignores SIGTERM (a shell without ``exec``, no tini), run on the local Pod runner.

The kubelet SIGKILLs it only when the grace period ends; memsync-sync gets its SIGTERM only then, with the
2 s minimum left (its preStop push, at the start of the termination, still ran). The session must say
exactly that (``SandboxKilled``), not blame the flush.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from memsync.controller.conditions import condition

from .harness import SANDBOX_CONTAINER, SYNC_CONTAINER, container_status
from .test_scenarios import make_store, new_session

if TYPE_CHECKING:
    from conftest import RunningStoreServer

pytestmark = pytest.mark.timeout(150)

MARKER = "/tmp/ignoring-sigterm"  # inside the sandbox container's own root
IGNORES_SIGTERM = (
    "import os, pathlib, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    f"marker = pathlib.Path(os.environ.get('MEMSYNC_TEST_ROOT', '') + '{MARKER}')\n"
    "marker.parent.mkdir(parents=True, exist_ok=True)\n"
    "marker.touch()\n"
    "time.sleep(600)\n"
)
GRACE = 6.0  # a short grace period instead of the Pod's own (50 s), so the test stays short


async def test_a_sandbox_that_ignores_sigterm_is_reported_as_killed_at_the_deadline(
    tmp_path: Path, store_server: RunningStoreServer
) -> None:
    store = await make_store(store_server, "notes", {"/a.md": "a"})
    session = await new_session(
        tmp_path,
        store_server,
        "stubborn",
        [(store, "notes", "read_write")],
        {"image": "python:3.11", "command": ["python", "-c", IGNORES_SIGTERM]},
    )
    runner = session.runner
    async with runner:
        await runner.start()
        await runner.wait_until(
            lambda r: r.host_path(SANDBOX_CONTAINER, MARKER).exists(), 60, "the sandbox ignoring SIGTERM"
        )
        session.deleted_at = datetime.now(UTC)
        pod_status = await runner.delete(grace_period_seconds=GRACE)
        status = session.status()

    sandbox = container_status(pod_status, SANDBOX_CONTAINER)["state"]["terminated"]
    assert sandbox["exitCode"] == 137, session.explain()
    ev = runner.event_index
    # The sidecar's preStop push runs at once; its SIGTERM waits for the sandbox, so it comes at the deadline,
    # together with the sandbox's SIGKILL (the kubelet stops waiting for a sidecar's turn there too).
    assert ev(SYNC_CONTAINER, "prestop-start") < ev(SANDBOX_CONTAINER, "sigkill")
    assert ev(SANDBOX_CONTAINER, "sigterm") < ev(SYNC_CONTAINER, "sigterm")
    assert ev(SANDBOX_CONTAINER, "sigterm") < ev(SANDBOX_CONTAINER, "sigkill")
    assert status["phase"] == "Failed", status
    ready = condition(status, "Ready")
    assert ready is not None and ready["reason"] == "SandboxKilled", status
    assert "ignored SIGTERM" in ready["message"] and "tini" in ready["message"]
