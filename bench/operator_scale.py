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
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from _common import format_table  # noqa: E402
from cluster.tier.__main__ import ClusterInfo, spawn_serve, stop_serve, wait_ready  # noqa: E402
from cluster.tier.controlplane import OPERATOR_USER  # noqa: E402
from memsync.crd.models import API_VERSION, sandbox_template  # noqa: E402

NAMESPACE = "bench"
TARGET_SECONDS = 60.0
TARGET_RSS_MB = 250.0


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


def smem(index: int) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "SessionMemory",
        "metadata": {"name": f"s{index:05d}", "namespace": NAMESPACE},
        "spec": {
            "sessionId": f"sesn_bench{index:05d}",
            "workItemSecretRef": {"name": "work", "key": "work-secret"},
            "apiBaseUrl": "http://127.0.0.1:9",
            "stores": [
                {"memoryStoreId": f"memstore_bench{index:05d}", "name": "notes", "access": "read_write"}
            ],
            "template": sandbox_template({"image": "memsync:kind", "command": ["sleep", "1"]}),
        },
    }


def count(info: ClusterInfo, resource: str) -> tuple[int, int]:
    """(objects, objects with a status phase) of ``resource`` in the namespace."""
    items = json.loads(kubectl(info, "-n", NAMESPACE, "get", resource, "-o", "json"))["items"]
    return len(items), sum(1 for i in items if (i.get("status") or {}).get("phase"))


def operator_pid(info: ClusterInfo) -> int:
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
    [status] = [c for p in pods for c in p["status"]["containerStatuses"] if c["name"] == "operator"]
    return int(status["containerID"].removeprefix("process://"))


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def audit_requests(audit_log: Path, since: str) -> collections.Counter[str]:
    verbs: collections.Counter[str] = collections.Counter()
    with audit_log.open() as fh:
        for line in fh:
            event = json.loads(line)
            if event["user"]["username"] == OPERATOR_USER and event["requestReceivedTimestamp"] >= since:
                resource = (event.get("objectRef") or {}).get("resource", "")
                verbs[f"{event['verb']} {resource}"] += 1
    return verbs


def run(count_: int, timeout: float) -> int:
    with tempfile.TemporaryDirectory(prefix="memsync-scale-") as tmp:
        state = Path(tmp)
        proc = spawn_serve(state)
        try:
            info = wait_ready(state, proc)
            kubectl(info, "apply", "--server-side", "-k", str(REPO / "manifests/overlays/kind"))
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
            pid = operator_pid(info)
            since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            started = time.monotonic()
            body = {"apiVersion": "v1", "kind": "List", "items": [smem(i) for i in range(count_)]}
            kubectl(info, "create", "-f", "-", input=json.dumps(body))
            created = time.monotonic() - started
            pods_at = status_at = None
            deadline = started + timeout
            while (pods_at is None or status_at is None) and time.monotonic() < deadline:
                if pods_at is None and count(info, "pods")[0] >= count_:
                    pods_at = time.monotonic() - started
                if status_at is None and count(info, "sessionmemories")[1] >= count_:
                    status_at = time.monotonic() - started
                time.sleep(1)
            rss = peak_rss_mb(pid)
            time.sleep(2)  # let the audit log catch up with the last requests
            verbs = audit_requests(Path(info.state_dir) / "logs" / "audit.log", since)
        finally:
            stop_serve(proc.pid)
            proc.wait(timeout=60)

    def seconds(value: float | None) -> str:
        return f"{value:.1f}" if value is not None else f"> {timeout:.0f} (timed out)"

    rows = [
        ("SessionMemories created (kubectl create of one List)", f"{created:.1f} s", ""),
        (f"every sandbox Pod exists ({count_})", f"{seconds(pods_at)} s", f"<= {TARGET_SECONDS:.0f} s"),
        (f"every status written ({count_})", f"{seconds(status_at)} s", f"<= {TARGET_SECONDS:.0f} s"),
        ("operator peak RSS", f"{rss:.0f} MB", f"<= {TARGET_RSS_MB:.0f} MB"),
        ("operator API requests", str(sum(verbs.values())), ""),
    ]
    rows += [(f"  {verb}", str(n), "") for verb, n in verbs.most_common()]
    print(format_table(("measure", "value", "target"), rows))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    return run(args.count, args.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
