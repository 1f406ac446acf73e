"""Operator scale on the real control plane (the cluster tier): N SessionMemories at once.

It starts the cluster tier (``make controlplane`` first; root on Linux), deploys ``manifests/overlays/kind``,
cordons the node so the sandbox Pods stay Pending (nothing runs them), creates N SessionMemories (default
1,000) in one namespace with one work-item Secret, and measures:

- the time from the first create until every sandbox Pod exists, and until every SessionMemory has a
  status phase written by the operator;
- the API requests the operator made (the API server's audit log, one event per request of the operator's
  ServiceAccount), by verb;
- the operator's peak RSS (``VmHWM`` of its container's process).

Targets: <= 60 s and <= 250 MB. It prints a table and stops by itself (every wait is bounded).

    .venv/bin/python bench/operator_scale.py             # N = 1,000
    .venv/bin/python bench/operator_scale.py --count 200
"""

from __future__ import annotations

import argparse
import base64
import collections
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from _common import format_table  # noqa: E402
from cluster.tier.__main__ import ClusterInfo, spawn_serve, stop_serve, wait_ready  # noqa: E402
from cluster.tier.controlplane import OPERATOR_USER  # noqa: E402
from memsync.controller.memtrace import ENV_PATH  # noqa: E402
from memsync.crd.models import API_VERSION, sandbox_template  # noqa: E402

NAMESPACE = "bench"
TARGET_SECONDS = 60.0
TARGET_RSS_MB = 250.0
CREATE_STREAMS = 4
OPERATOR_DEPLOYMENT = ("-n", "memsync-system", "deployment/memsync-operator")
HEAP_FILE = "/tmp/memsync-heap.txt"  # noqa: S108 (in the operator container: its /tmp is its own emptyDir)


def kubectl(info: ClusterInfo, *args: str, input: str | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(
        [info.kubectl, "--kubeconfig", info.kubeconfig, *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:3])}: {proc.stderr.strip()}")
    return proc.stdout


def smem(
    index: int,
    *,
    namespace: str = NAMESPACE,
    store: str | None = None,
    template: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``index``-th SessionMemory of a benchmark: its own store unless ``store`` names one for all, and
    a sandbox that would sleep unless ``template`` says otherwise."""
    return {
        "apiVersion": API_VERSION,
        "kind": "SessionMemory",
        "metadata": {"name": f"s{index:05d}", "namespace": namespace},
        "spec": {
            "sessionId": f"sesn_{namespace}{index:05d}",
            "workItemSecretRef": {"name": "work", "key": "work-secret"},
            "apiBaseUrl": "http://127.0.0.1:9",
            "stores": [
                {
                    "memoryStoreId": store or f"memstore_bench{index:05d}",
                    "name": "notes",
                    "access": "read_write",
                }
            ],
            "template": template or sandbox_template({"image": "memsync:kind", "command": ["sleep", "1"]}),
        },
    }


def pod_count(info: ClusterInfo) -> int:
    """The Pods in the namespace, from a one-item page (the API server counts the rest, sends none)."""
    page = json.loads(kubectl(info, "get", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1"))
    return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)


def status_count(info: ClusterInfo) -> int:
    """The SessionMemories in the namespace that have a status phase."""
    items = json.loads(kubectl(info, "-n", NAMESPACE, "get", "sessionmemories", "-o", "json"))["items"]
    return sum(1 for i in items if (i.get("status") or {}).get("phase"))


def create_all(info: ClusterInfo, count_: int, make: Callable[[int], dict[str, Any]] = smem) -> None:
    """Create the SessionMemories (``make(index)``) as ``CREATE_STREAMS`` concurrent clients would (one List
    each)."""
    procs = []
    for stream in range(CREATE_STREAMS):
        items = [make(i) for i in range(stream, count_, CREATE_STREAMS)]
        proc = subprocess.Popen(
            [info.kubectl, "--kubeconfig", info.kubeconfig, "create", "-f", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        proc.stdin.close()
        procs.append(proc)
    for proc in procs:
        if proc.wait(timeout=600) != 0:
            raise RuntimeError(f"kubectl create: {proc.stderr.read() if proc.stderr else ''}")


def one_replica(info: ClusterInfo) -> None:
    """The benchmarks measure one operator process: the Deployment (two replicas electing a leader) is
    scaled to one, which takes the Lease and acts."""
    kubectl(info, "scale", *OPERATOR_DEPLOYMENT, "--replicas=1")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = json.loads(
            kubectl(
                info,
                "-n",
                "memsync-system",
                "get",
                "pods",
                "-l",
                "app.kubernetes.io/name=memsync-operator",
                "-o",
                "json",
            )
        )["items"]
        if len(pods) == 1:
            return
        time.sleep(1)
    raise RuntimeError("the operator's second replica did not go away")


def operator_status(info: ClusterInfo) -> dict[str, Any]:
    """The operator container's status (its ``containerID`` is ``process://<pid>`` on this tier)."""
    pods = json.loads(
        kubectl(
            info,
            "-n",
            "memsync-system",
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=memsync-operator",
            "-o",
            "json",
        )
    )["items"]
    [status] = [
        c
        for p in pods
        if not p["metadata"].get("deletionTimestamp")  # the replica scaled away may linger a moment
        for c in p["status"].get("containerStatuses") or []
        if c["name"] == "operator"
    ]
    result: dict[str, Any] = status
    return result


def rss_mb(pid: int, field: str = "VmHWM") -> float | None:
    """The process's peak RSS (``VmHWM``), or its current one (``VmRSS``); None once it has exited."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return None


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of the process; None once it has exited."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class OperatorWatch:
    """The operator's peak RSS and CPU time, sampled while the benchmark waits, across any restart of its
    container (CPU time does not depend on how busy the rest of the machine is)."""

    def __init__(self, info: ClusterInfo) -> None:
        self.info = info
        self.peak = self.now = 0.0
        self.cpu = self.cpu_before = self.cpu_of_ended = 0.0
        self.pid = self._current_pid()
        self.restarts_before = self.restarts = int(operator_status(info).get("restartCount") or 0)
        self.cpu_before = cpu_seconds(self.pid) or 0.0

    def _current_pid(self) -> int:
        return int(str(operator_status(self.info).get("containerID", "")).removeprefix("process://") or 0)

    def sample(self) -> None:
        rss, cpu = rss_mb(self.pid), cpu_seconds(self.pid)
        if cpu is not None:
            self.cpu = self.cpu_of_ended + cpu - self.cpu_before
        if rss is None:  # the container restarted (or is restarting): follow the new process
            self.cpu_of_ended, self.cpu_before = self.cpu, 0.0
            status = operator_status(self.info)
            self.restarts = int(status.get("restartCount") or 0)
            self.pid = int(str(status.get("containerID", "")).removeprefix("process://") or 0)
            rss = rss_mb(self.pid)
        self.peak = max(self.peak, rss or 0.0)
        self.now = rss_mb(self.pid, "VmRSS") or 0.0


def _instant(stamp: str) -> float:
    """An audit timestamp (RFC 3339 with microseconds, ``Z``) as seconds since the epoch."""
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def audit_requests(
    audit_log: Path, since: str, until: str | None = None
) -> tuple[collections.Counter[str], list[float]]:
    """The operator's requests (received at ``since`` or later, and before ``until``) by verb and resource,
    and how long the API server took for each (from receiving it to completing the response; watches
    excluded). Both bounds are UTC timestamps as the audit log writes them (they compare as strings)."""
    verbs: collections.Counter[str] = collections.Counter()
    took: list[float] = []
    with audit_log.open() as fh:
        for line in fh:
            event = json.loads(line)
            received = event["requestReceivedTimestamp"]
            if until is not None and received >= until:
                continue
            if event["user"]["username"] == OPERATOR_USER and received >= since:
                resource = (event.get("objectRef") or {}).get("resource", "")
                verbs[f"{event['verb']} {resource}"] += 1
                if event["verb"] != "watch":
                    took.append(
                        _instant(event["stageTimestamp"]) - _instant(event["requestReceivedTimestamp"])
                    )
    return verbs, sorted(took)


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def trace_operator(info: ClusterInfo) -> None:
    """Run the operator with tracemalloc, and without its liveness probe (tracing slows it too much)."""
    no_probe = [{"op": "remove", "path": "/spec/template/spec/containers/0/livenessProbe"}]
    kubectl(info, "patch", *OPERATOR_DEPLOYMENT, "--type=json", "-p", json.dumps(no_probe))
    kubectl(info, "set", "env", *OPERATOR_DEPLOYMENT, f"{ENV_PATH}={HEAP_FILE}")


def dump_heap(pid: int, target: Path) -> None:
    """Ask the operator (started with ``MEMSYNC_TRACEMALLOC``) for its heap report and copy it to ``target``.

    The file is in the operator container's own ``/tmp``, reached through its mount namespace."""
    inside = Path(f"/proc/{pid}/root") / HEAP_FILE.lstrip("/")
    inside.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 120
    while not inside.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    target.write_bytes(inside.read_bytes())


def run(
    count_: int,
    timeout: float,
    operator_log: Path | None = None,
    trace_memory: Path | None = None,
    operator_env: tuple[str, ...] = (),
) -> int:
    with tempfile.TemporaryDirectory(prefix="memsync-scale-") as tmp:
        state = Path(tmp)
        proc = spawn_serve(state)
        try:
            info = wait_ready(state, proc)
            kubectl(info, "apply", "--server-side", "-k", str(REPO / "manifests/overlays/kind"))
            one_replica(info)
            if trace_memory is not None:
                trace_operator(info)
            if operator_env:
                kubectl(info, "set", "env", *OPERATOR_DEPLOYMENT, *operator_env)
            kubectl(
                info,
                "-n",
                "memsync-system",
                "rollout",
                "status",
                "deployment/memsync-operator",
                "--timeout=180s",
                timeout=200,
            )
            kubectl(info, "cordon", info.node)
            kubectl(info, "create", "namespace", NAMESPACE)
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "work", "namespace": NAMESPACE},
                "data": {"work-secret": base64.b64encode(b"not-used-pods-never-run").decode()},
            }
            kubectl(info, "apply", "-f", "-", input=json.dumps(secret))
            operator = OperatorWatch(info)
            since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            started = time.monotonic()
            create_all(info, count_)
            created = time.monotonic() - started
            pods_at = status_at = None
            deadline = started + timeout
            polls = 0
            while (pods_at is None or status_at is None) and time.monotonic() < deadline:
                if pods_at is None and pod_count(info) >= count_:
                    pods_at = time.monotonic() - started
                # A full listing is heavy for this API server: every third second until the Pods are there.
                listing = status_at is None and (pods_at is not None or polls % 3 == 0)
                if listing and status_count(info) >= count_:
                    status_at = time.monotonic() - started
                operator.sample()
                polls += 1
                time.sleep(1)
            operator.sample()
            if trace_memory is not None:
                dump_heap(operator.pid, trace_memory)
            last_end = operator_status(info).get("lastState", {}).get("terminated") or {}
            warnings = collections.Counter(
                f"{e['reason']}: {e.get('message', '')[:80]}"
                for e in json.loads(kubectl(info, "-n", "memsync-system", "get", "events", "-o", "json"))[
                    "items"
                ]
                if e.get("type") == "Warning"
            )
            if operator_log is not None:
                for log in Path(info.state_dir).glob(
                    "pods/memsync-system_memsync-operator-*/containers/operator/log"
                ):
                    operator_log.write_bytes(log.read_bytes())
            time.sleep(2)  # let the audit log catch up with the last requests
            verbs, took = audit_requests(Path(info.state_dir) / "logs" / "audit.log", since)
        finally:
            stop_serve(proc.pid)
            proc.wait(timeout=60)

    def seconds(value: float | None) -> str:
        return f"{value:.1f}" if value is not None else f"> {timeout:.0f} (timed out)"

    def after_last(value: float | None) -> str:
        return f"{value - created:.1f} s" if value is not None else "-"

    restarts = operator.restarts - operator.restarts_before
    rows = [
        (f"SessionMemories created ({CREATE_STREAMS} kubectl create, one List each)", f"{created:.1f} s", ""),
        (f"every sandbox Pod exists ({count_})", f"{seconds(pods_at)} s", f"<= {TARGET_SECONDS:.0f} s"),
        ("  of which after the last create", after_last(pods_at), ""),
        (f"every status written ({count_})", f"{seconds(status_at)} s", f"<= {TARGET_SECONDS:.0f} s"),
        ("  of which after the last create", after_last(status_at), ""),
        ("operator peak RSS", f"{operator.peak:.0f} MB", f"<= {TARGET_RSS_MB:.0f} MB"),
        ("operator RSS at the end", f"{operator.now:.0f} MB", ""),
        ("operator CPU time", f"{operator.cpu:.1f} s", ""),
        ("operator container restarts", str(restarts), "0"),
    ]
    if restarts:
        why = f"{last_end.get('reason')} (exit {last_end.get('exitCode')})"
        rows.append(("  last one ended", why, ""))
    rows += [(f"  warning {what}", str(n), "") for what, n in warnings.most_common(3)]
    rows += [
        ("operator API requests", str(sum(verbs.values())), ""),
    ]
    rows += [(f"  {verb}", str(n), "") for verb, n in verbs.most_common()]
    rows.append(
        (
            "  API server time per request (p50 / p90 / max)",
            " / ".join(f"{percentile(took, q) * 1000:.0f}" for q in (0.5, 0.9, 1.0)) + " ms",
            "",
        )
    )
    rows.append(("machine load (1-minute average at the end)", f"{os.getloadavg()[0]:.1f}", ""))
    print(format_table(("measure", "value", "target"), rows))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--operator-log", type=Path, help="copy the operator's log here at the end")
    parser.add_argument(
        "--trace-memory",
        type=Path,
        metavar="FILE",
        help="run the operator with tracemalloc and write its heap report (by allocation site) here at "
        "the end; tracing slows the operator, so its times are not comparable",
    )
    parser.add_argument(
        "--operator-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set this in the operator's environment (repeatable), e.g. to compare allocator settings",
    )
    args = parser.parse_args()
    return run(args.count, args.timeout, args.operator_log, args.trace_memory, tuple(args.operator_env))


if __name__ == "__main__":
    raise SystemExit(main())
