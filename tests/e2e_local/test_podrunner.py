"""The local Pod runner's semantics, proven with tiny python containers (real processes and signals)."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from .podrunner import PodRunner, PodSpecError

SHARED = "/mnt/shared"


def py(code: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code)]


# Appends one line to the shared file; used by most containers below.
APPEND = f"""
import os
def note(line):
    with open(os.environ["MEMSYNC_TEST_ROOT"] + "{SHARED}/trace", "a") as fh:
        fh.write(line + "\\n")
def message(text):
    with open(os.environ["MEMSYNC_TEST_ROOT"] + "/dev/termination-log", "w") as fh:
        fh.write(text)
"""


def container(name: str, code: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "local",
        "command": py(APPEND + textwrap.dedent(code)),
        "volumeMounts": [{"name": "shared", "mountPath": SHARED}],
        **extra,
    }


def pod(
    init: list[dict[str, Any]], main: list[dict[str, Any]], *, grace: float = 5, name: str = "p"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace,
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": init,
            "containers": main,
        },
    }


# A sidecar serving /readyz on $MEMSYNC_METRICS_PORT after a short delay; SIGTERM -> notes and exits 0.
SIDECAR = """
import http.server, os, signal, sys, threading, time
def on_term(*_):
    trace = open(os.environ["MEMSYNC_TEST_ROOT"] + "/mnt/shared/trace").read()
    note("sidecar-sigterm main-exited=" + str("main-exit" in trace))
    message("sidecar bye")
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
note("sidecar-start port=" + os.environ["MEMSYNC_METRICS_PORT"])
time.sleep(0.3)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("127.0.0.1", int(os.environ["MEMSYNC_METRICS_PORT"])), H)
note("sidecar-listening")
threading.Thread(target=srv.serve_forever, daemon=True).start()
while True:
    time.sleep(1)
"""


PROBE = {"httpGet": {"path": "/readyz", "port": 9477}, "periodSeconds": 1}


def sidecar(
    code: str = SIDECAR, pre_stop: list[str] | None = None, *, startup: bool = True
) -> dict[str, Any]:
    """A native sidecar; with ``startup`` it has a startupProbe (as memsync-sync has), else readiness only."""
    probes = {"startupProbe": PROBE, "readinessProbe": PROBE} if startup else {"readinessProbe": PROBE}
    spec = container(
        "sync",
        code,
        restartPolicy="Always",
        env=[{"name": "MEMSYNC_METRICS_PORT", "value": "9477"}],
        **probes,
    )
    if pre_stop is not None:
        spec["lifecycle"] = {"preStop": {"exec": {"command": pre_stop}}}
    return spec


def trace(runner: PodRunner) -> list[str]:
    path = runner.volume_dir("shared") / "trace"
    return path.read_text().splitlines() if path.exists() else []


def status_of(status: dict[str, Any], name: str) -> dict[str, Any]:
    for entry in status["initContainerStatuses"] + status["containerStatuses"]:
        if entry["name"] == name:
            return entry
    raise KeyError(name)


async def test_init_containers_run_in_order_then_main_and_messages_are_collected(tmp_path: Path) -> None:
    manifest = pod(
        [
            container("first", 'note("first"); message("one")'),
            container("second", 'note("second"); message("two")'),
        ],
        [container("main", 'import json; note("main"); message(json.dumps({"phase": "done"}))')],
    )
    async with PodRunner(manifest, workdir=tmp_path) as runner:
        await runner.start()
        status = await runner.wait(timeout=30)
        assert trace(runner) == ["first", "second", "main"]
        assert status["phase"] == "Succeeded"
        first = status_of(status, "first")
        assert first["state"]["terminated"]["exitCode"] == 0
        assert first["state"]["terminated"]["reason"] == "Completed"
        assert first["state"]["terminated"]["message"] == "one"
        assert status_of(status, "second")["state"]["terminated"]["message"] == "two"
        main = status_of(status, "main")
        assert json.loads(main["state"]["terminated"]["message"]) == {"phase": "done"}
        assert main["restartCount"] == 0
        assert {c["type"]: c["status"] for c in status["conditions"]}["Initialized"] == "True"
        assert runner.event_index("first", "exited") < runner.event_index("second", "started")
        assert runner.event_index("second", "exited") < runner.event_index("main", "started")


async def test_failed_init_container_stops_the_pod(tmp_path: Path) -> None:
    manifest = pod(
        [
            container("first", 'note("first"); message("cannot mount"); raise SystemExit(3)'),
            container("second", 'note("second")'),
        ],
        [container("main", 'note("main")')],
    )
    async with PodRunner(manifest, workdir=tmp_path) as runner:
        await runner.start()
        status = await runner.wait(timeout=30)
        assert trace(runner) == ["first"]
        assert status["phase"] == "Failed"
        terminated = status_of(status, "first")["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
            3,
            "Error",
            "cannot mount",
        )
        assert status_of(status, "second")["state"] == {"waiting": {"reason": "PodInitializing"}}
        assert status_of(status, "main")["state"] == {"waiting": {"reason": "PodInitializing"}}


async def test_failed_init_container_falls_back_to_logs_when_asked(tmp_path: Path) -> None:
    first = container("first", 'import sys; print("boom: the reason", file=sys.stderr); sys.exit(1)')
    first["terminationMessagePolicy"] = "FallbackToLogsOnError"
    async with PodRunner(pod([first], [container("main", "pass")]), workdir=tmp_path) as runner:
        await runner.start()
        status = await runner.wait(timeout=30)
        assert status_of(status, "first")["state"]["terminated"]["message"] == "boom: the reason"


# Serves /readyz with 503 (noting each probe) until the test creates <shared>/open, then 200.
GATED_SIDECAR = """
import http.server, os, signal, sys, threading, time
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
gate = os.environ["MEMSYNC_TEST_ROOT"] + "/mnt/shared/open"
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = os.path.exists(gate)
        note("probe " + ("200" if ok else "503"))
        self.send_response(200 if ok else 503); self.end_headers()
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("127.0.0.1", int(os.environ["MEMSYNC_METRICS_PORT"])), H)
note("sidecar-listening")
srv.serve_forever()
"""


async def test_the_next_container_waits_for_the_startup_probe_not_for_readiness(tmp_path: Path) -> None:
    manifest = pod([sidecar(GATED_SIDECAR)], [container("main", 'note("main")')])
    async with PodRunner(manifest, workdir=tmp_path) as runner:
        await runner.start()
        # The sidecar runs and answers its startupProbe with 503, again and again: main never starts.
        await runner.wait_until(lambda r: trace(r).count("probe 503") >= 3, 30, "three failed probes")
        assert "main" not in trace(runner)
        assert runner.status()["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
        assert status_of(runner.status(), "sync")["started"] is False
        (runner.volume_dir("shared") / "open").touch()
        status = await runner.wait(timeout=30)
        lines = trace(runner)
        assert lines.index("probe 200") < lines.index("main")
        assert status["phase"] == "Succeeded"


async def test_a_sidecar_without_startup_probe_gates_on_running_not_on_readiness(tmp_path: Path) -> None:
    # Its readinessProbe never passes; the kubelet still starts the next container once it runs.
    manifest = pod([sidecar(GATED_SIDECAR, startup=False)], [container("main", 'note("main")')])
    async with PodRunner(manifest, workdir=tmp_path) as runner:
        await runner.start()
        status = await runner.wait(timeout=30)
        assert "main" in trace(runner) and "probe 200" not in trace(runner)
        assert status["phase"] == "Succeeded"
        assert runner.event_index("sync", "started") < runner.event_index("main", "started")


async def test_sidecar_has_started_before_the_next_container_and_ports_are_mapped(tmp_path: Path) -> None:
    manifest = pod([sidecar(), container("after", 'note("after")')], [container("main", 'note("main")')])
    async with PodRunner(manifest, workdir=tmp_path) as runner:
        other = PodRunner(manifest, workdir=tmp_path / "other")
        assert runner.port_map[9477] != 9477
        assert runner.port_map[9477] != other.port_map[9477]  # two Pods never share a port
        await runner.start()
        status = await runner.wait(timeout=30)
        lines = trace(runner)
        assert lines[0] == f"sidecar-start port={runner.port_map[9477]}"
        assert lines.index("sidecar-listening") < lines.index("after") < lines.index("main")
        assert status["phase"] == "Succeeded"
        sync = status_of(status, "sync")
        assert sync["state"]["terminated"]["message"] == "sidecar bye"
        assert "started" in sync and "ready" in sync


async def test_pre_stop_runs_while_main_handles_sigterm_and_sidecar_is_stopped_last(tmp_path: Path) -> None:
    # main: on SIGTERM waits (bounded) until the sidecar's preStop has written, notes it, exits 0.
    main = container(
        "main",
        """
        import os, signal, time
        path = os.environ["MEMSYNC_TEST_ROOT"] + "/mnt/shared/trace"
        def on_term(*_):
            note("main-sigterm")
            end = time.monotonic() + 10
            while "prestop-ran" not in open(path).read() and time.monotonic() < end:
                time.sleep(0.05)
            note("main-exit saw-prestop=" + str("prestop-ran" in open(path).read()))
            os._exit(0)
        signal.signal(signal.SIGTERM, on_term)
        note("main-running")
        while True:
            time.sleep(1)
        """,
    )
    hook = py(APPEND + 'note("prestop-ran")')
    manifest = pod([sidecar(pre_stop=hook)], [main], grace=20)
    async with PodRunner(manifest, workdir=tmp_path) as runner:
        await runner.start()
        await runner.wait_until(lambda r: "main-running" in trace(r), 30, "main running")
        status = await runner.delete()
        lines = trace(runner)
        assert "main-exit saw-prestop=True" in lines
        assert lines[-1] == "sidecar-sigterm main-exited=True"
        ev = runner.event_index
        assert ev("sync", "prestop-start") < ev("main", "exited")
        assert ev("main", "sigterm") < ev("main", "exited") < ev("sync", "sigterm")
        assert runner.event_index("sync", "sigkill") == -1
        assert runner.event_index("main", "sigkill") == -1
        assert status["phase"] == "Succeeded"  # main exited 0 on SIGTERM
        assert status_of(status, "sync")["state"]["terminated"]["exitCode"] == 0


async def test_natural_exit_of_main_stops_sidecar_after_its_pre_stop(tmp_path: Path) -> None:
    hook = py(APPEND + 'note("prestop-ran")')
    manifest = pod([sidecar(pre_stop=hook)], [container("main", 'note("main-exit")')])
    async with PodRunner(manifest, workdir=tmp_path) as runner:
        await runner.start()
        status = await runner.wait(timeout=30)
        lines = trace(runner)
        assert lines[-3:] == ["main-exit", "prestop-ran", "sidecar-sigterm main-exited=True"]
        assert status["phase"] == "Succeeded"
        assert all("terminated" in s["state"] for s in status["initContainerStatuses"])


async def test_grace_period_end_kills_what_still_runs(tmp_path: Path) -> None:
    stubborn = container(
        "main",
        """
        import signal, time
        signal.signal(signal.SIGTERM, lambda *_: note("main-ignores-sigterm"))
        note("main-running")
        while True:
            time.sleep(0.1)
        """,
    )
    hang = py("import time; time.sleep(60)")
    manifest = pod([sidecar(pre_stop=hang)], [stubborn], grace=1)
    async with PodRunner(manifest, workdir=tmp_path) as runner:
        await runner.start()
        await runner.wait_until(lambda r: "main-running" in trace(r), 30, "main running")
        status = await runner.delete()
        main = status_of(status, "main")["state"]["terminated"]
        assert main["exitCode"] == 137  # SIGKILL
        assert "main-ignores-sigterm" in trace(runner)
        ev = runner.event_index
        assert ev("main", "sigterm") < ev("main", "sigkill")
        assert ev("sync", "prestop-end:timeout") >= 0
        # the sidecar still gets its SIGTERM (with the kubelet's minimum 2 s) and exits by itself
        assert ev("sync", "prestop-end:timeout") < ev("sync", "sigterm")
        assert ev("sync", "sigkill") == -1
        assert status_of(status, "sync")["state"]["terminated"]["exitCode"] == 0
        assert status["phase"] == "Failed"


async def test_killed_sidecar_is_restarted(tmp_path: Path) -> None:
    main = container(
        "main",
        """
        import os, time
        path = os.environ["MEMSYNC_TEST_ROOT"] + "/mnt/shared/trace"
        while open(path).read().count("sidecar-listening") < 2:
            time.sleep(0.05)
        note("main-exit")
        """,
    )
    async with PodRunner(pod([sidecar()], [main]), workdir=tmp_path) as runner:
        await runner.start()
        await runner.wait_until(lambda r: r.is_running("main"), 30, "main running")
        await runner.kill("sync")
        await runner.wait_until(
            lambda r: r.restart_count("sync") == 1 and r.is_running("sync"), 30, "restart"
        )
        mid = runner.status()
        sync = status_of(mid, "sync")
        assert sync["lastState"]["terminated"]["exitCode"] == 137
        assert sync["restartCount"] == 1
        assert "running" in sync["state"]
        status = await runner.wait(timeout=30)
        assert status["phase"] == "Succeeded"
        assert trace(runner).count("sidecar-listening") == 2
        assert status_of(status, "sync")["restartCount"] == 1


def secret(name: str, **values: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "ns"},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }


def env_main(*refs: dict[str, Any]) -> dict[str, Any]:
    return container(
        "main",
        'note(os.environ.get("TOKEN", "<unset>") + "|" + os.environ.get("GREETING", "<unset>"))',
        env=[*refs, {"name": "GREETING", "value": "hi $(TOKEN)"}],
    )


def token_ref(name: str, key: str = "token", optional: bool | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name, "key": key}
    if optional is not None:
        ref["optional"] = optional
    return {"name": "TOKEN", "valueFrom": {"secretKeyRef": ref}}


async def test_secret_key_ref_is_resolved(tmp_path: Path) -> None:
    manifest = pod([], [env_main(token_ref("work"))])
    async with PodRunner(manifest, workdir=tmp_path, secrets=[secret("work", token="s3cr3t")]) as runner:
        await runner.start()
        assert (await runner.wait(timeout=30))["phase"] == "Succeeded"
        assert trace(runner) == ["s3cr3t|hi s3cr3t"]


async def test_optional_secret_key_ref_may_be_missing(tmp_path: Path) -> None:
    manifest = pod([], [env_main(token_ref("absent", optional=True))])
    async with PodRunner(manifest, workdir=tmp_path) as runner:
        await runner.start()
        assert (await runner.wait(timeout=30))["phase"] == "Succeeded"
        assert trace(runner) == ["<unset>|hi $(TOKEN)"]


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ([], 'secret "work" not found'),
        ([secret("work", other="x")], "couldn't find key token in Secret ns/work"),
    ],
)
async def test_missing_secret_or_key_is_a_config_error(
    tmp_path: Path, secrets: list[dict[str, Any]], message: str
) -> None:
    init = container("mount", 'note("mount ran")', env=[token_ref("work")])
    manifest = pod([init], [container("main", 'note("main ran")')])
    async with PodRunner(manifest, workdir=tmp_path, secrets=secrets) as runner:
        await runner.start()
        status = await runner.wait(timeout=30)
        assert status["phase"] == "Pending"
        assert status_of(status, "mount")["state"] == {
            "waiting": {"reason": "CreateContainerConfigError", "message": message}
        }
        assert status_of(status, "main")["state"] == {"waiting": {"reason": "PodInitializing"}}
        assert not (runner.volume_dir("shared") / "trace").exists()  # nothing ever ran


async def test_mounts_are_symlinks_into_per_pod_volumes(tmp_path: Path) -> None:
    writer = container(
        "writer",
        """
        import os
        root = os.environ["MEMSYNC_TEST_ROOT"]
        os.makedirs(root + "/mnt/shared/store")
        open(root + "/mnt/shared/store/a.md", "w").write("hello")
        note("cwd=" + os.getcwd())
        """,
    )
    reader = container(
        "reader", 'note(open(os.environ["MEMSYNC_TEST_ROOT"] + "/mnt/shared/store/a.md").read())'
    )
    async with PodRunner(pod([writer], [reader]), workdir=tmp_path / "one") as runner:
        await runner.start()
        assert (await runner.wait(timeout=30))["phase"] == "Succeeded"
        assert trace(runner) == [f"cwd={runner.root('writer')}", "hello"]
        mount = runner.host_path("reader", SHARED)
        assert mount.is_symlink()
        assert not (mount / "store").is_symlink()
        assert (runner.volume_dir("shared") / "store" / "a.md").read_text() == "hello"
    async with PodRunner(pod([], [reader]), workdir=tmp_path / "two") as second:
        await second.start()
        status = await second.wait(timeout=30)
        assert status["phase"] == "Failed"  # a fresh emptyDir: the first Pod's file is not there


def test_unmodelled_fields_are_refused(tmp_path: Path) -> None:
    manifest = pod([], [container("main", "pass")])
    manifest["spec"]["restartPolicy"] = "Always"
    with pytest.raises(PodSpecError, match="restartPolicy"):
        PodRunner(manifest, workdir=tmp_path)
    manifest = pod([], [container("main", "pass", lifecycle={"postStart": {"exec": {"command": ["true"]}}})])
    with pytest.raises(PodSpecError, match="postStart"):
        PodRunner(manifest, workdir=tmp_path)
