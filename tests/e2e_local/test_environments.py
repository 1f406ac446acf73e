"""An environment's session end to end on the local Pod runner: environment → work item → the poll loop's
Secret and SessionMemory → the operator's Pod → ``memsync session run`` (the SDK's runner) executes a
scripted ``write`` into /mnt/memory/<slug>/ → the session ends → the sidecar's final sync and flush upload it
→ the work item is stopped after the last memory write → the SessionMemory is Succeeded → and removed after
its retention. The Kubernetes objects live in memory; everything else is real."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from memsync.controller.conditions import now_utc
from memsync.controller.environment import decisions as d
from memsync.controller.environment.loop import EnvironmentLoop
from memsync.controller.sessionmemory.derive import derive_status
from memsync.controller.sessionmemory.pod import SANDBOX_CONTAINER, SYNC_CONTAINER, build_sandbox_pod
from memsync.crd.models import sandbox_template, validate_spec
from support.environment_objects import Objects
from support.environments import memories_of, scripted_session, stopped_after_the_last_write

from .harness import AGENT_IMAGE, HARNESS_ENV, NAMESPACE
from .podrunner import PodRunner

if TYPE_CHECKING:
    from conftest import RunningStoreServer

RUN_TIMEOUT = 120.0


async def test_a_scripted_session_writes_a_memory_that_lands_before_the_item_stops(
    tmp_path: Path, store_server: RunningStoreServer
) -> None:
    admin = httpx.Client(base_url=store_server.url, headers={"x-api-key": store_server.admin_key}, timeout=30)
    # relative to the runner's working directory, /mnt/memory: the store's own folder
    scripted = scripted_session(admin, "{slug}/hello.md", "written by the agent\n")

    environment = {
        "apiVersion": "agents.memsync.dev/v1alpha1",
        "kind": "AgentEnvironment",
        "metadata": {"name": "e2e-env", "namespace": NAMESPACE, "uid": str(uuid.uuid4()), "generation": 1},
        "spec": {
            "environmentId": scripted.environment_id,
            "environmentKeySecretRef": {"name": "env-key", "key": "key"},
            "apiBaseUrl": store_server.url,
            "finishedRetentionSeconds": 0,
            "sync": {"intervalSeconds": 3600, "finalFlushSeconds": 10},
            "template": sandbox_template(
                {
                    "image": AGENT_IMAGE,
                    "command": ["memsync", "session", "run", "--max-idle", "5", "--final-timeout", "30"],
                    "workingDir": "/mnt/memory",
                }
            ),
        },
    }
    objects = Objects(environment, {"env-key": {"key": scripted.key}})
    loop = EnvironmentLoop(objects, NAMESPACE, "e2e-env")
    assert await loop.run_pass() == 0.0
    name = d.object_name(scripted.session_id)
    smem = objects.smems[name]
    secret = next(c for c in objects.created if c["kind"] == "Secret")
    spec = validate_spec(smem["spec"])
    pod = build_sandbox_pod(
        name=name, namespace=NAMESPACE, uid=str(uuid.uuid4()), spec=spec, agent_image=AGENT_IMAGE
    )

    runner = PodRunner(
        pod,
        workdir=tmp_path / "pod",
        secrets=[{**secret, "metadata": {**secret["metadata"]}}],
        harness_env=HARNESS_ENV,
    )
    async with runner:
        await runner.start()
        pod_status = await runner.wait(timeout=RUN_TIMEOUT)
    explain = "\n".join(f"--- {c} ---\n{runner.logs(c)[-4000:]}" for c in (SANDBOX_CONTAINER, SYNC_CONTAINER))
    assert pod_status["phase"] == "Succeeded", explain
    assert "final sync and flush done" in runner.logs(SANDBOX_CONTAINER), explain
    assert "the session runner asked for the final sync and flush" in runner.logs(SYNC_CONTAINER), explain
    # the sidecar's termination message is the final flush's report (the preStop flush after it sent nothing)
    report = json.loads(runner.termination_message(SYNC_CONTAINER) or "{}")
    assert report["stores"][scripted.store_id]["uploaded"] == 1, report

    # the memory is in the store, written by the final flush (the interval never came), before the stop
    assert memories_of(admin, scripted) == [("/hello.md", "written by the agent\n")], explain
    stopped_after_the_last_write(admin, scripted)

    # the SessionMemory is Succeeded, and the next pass removes it (retention 0) with its Secret
    status: dict[str, Any] = derive_status(
        None,
        {**pod, "status": runner.status()},
        stores={s.memory_store_id: s.effective_mount_path for s in spec.stores},
        generation=1,
        now=now_utc(),
    )
    assert status["phase"] == "Succeeded", (status, explain)
    objects.smems[name]["status"] = status
    await loop.run_pass()
    assert name not in objects.smems
    assert ("Secret", d.secret_name(scripted.session_id)) in objects.deleted
    final = objects.env["status"] if objects.env else {}
    assert (final["claimed"], final["succeeded"], final["active"]) == (1, 1, 0)
    admin.close()
