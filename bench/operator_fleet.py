"""The operator with a fleet of running sessions, on the real control plane (the cluster tier) with kwok.

For each N (``--count``, repeatable; default 1,000 then 5,000, each on a fresh cluster) it starts the
cluster tier (``make controlplane`` and ``make tools`` first; root on Linux), deploys
``manifests/overlays/kind``, and then:

- starts ``health_stub.py`` (``bench/fleet``) in the operator Pod's network namespace: it answers every
  sidecar's ``/status`` on ``0.0.0.0:9477`` there, telling the Pods apart by the loopback address dialled;
- creates ceil(N / 100) kwok Nodes and starts kwok (the Stages in ``bench/fleet/stages.py``): Pods bound to
  them are reported Running, each with its own address in 127.100.0.0/16 as its Pod IP;
- creates N SessionMemories in one burst, their sandbox Pods placed on the kwok Nodes only (nodeSelector and
  toleration in the template), and waits until every one is Running (the time is printed: informative);
- lets it settle (``--settle``), then measures a steady-state window (``--window``) in which nothing changes:
  the operator's average and peak CPU (cores; peak over 5 s), its API requests per second by verb (the API
  server's audit log, the operator's ServiceAccount) and the sidecars' ``/status`` requests per second;
- turns ``--flips`` sidecars unhealthy, one every ``--flip-spacing`` s, and measures each until its
  SessionMemory's ``Synced`` condition is False (then turns it healthy again and measures that too);
- ends ``--ends`` Pods, one every ``--end-spacing`` s (a label kwok's ``fleet-pod-end`` Stage acts on: the
  sandbox and the sidecar exit 0, the Pod Succeeds), and measures from the Pod's end to the
  SessionMemory's phase;
- and, across the whole run, the operator's peak RSS and its container restarts.

It prints a table per N and one with every N side by side, with the targets (at N = 5,000). Every wait is
bounded; it stops everything it started. On a shared machine run it under the heavy lock:

    flock /work/locks/heavy.lock .venv/bin/python bench/operator_fleet.py     # N = 1,000 and 5,000
    flock /work/locks/heavy.lock .venv/bin/python bench/operator_fleet.py --count 200
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from cluster.tier.__main__ import ClusterInfo, spawn_serve, stop_serve, wait_ready  # noqa: E402
from cluster.tier.kubeapi import KubeApi  # noqa: E402
from fleet import processes, stages  # noqa: E402
from fleet.machine import CpuWindow, children  # noqa: E402
from fleet.observe import Fleet, until, watching  # noqa: E402
from fleet.probes import ends, flips  # noqa: E402
from fleet.report import PEAK_SPAN_S, Result, print_table  # noqa: E402
from memsync.agent.config import DEFAULT_INTERVAL_S  # noqa: E402
from memsync.controller.sessionmemory import phases as ph  # noqa: E402
from memsync.crd.models import sandbox_template  # noqa: E402
from operator_scale import (  # noqa: E402
    OperatorWatch,
    audit_requests,
    create_all,
    kubectl,
    one_replica,
    smem,
)

NAMESPACE = "fleet"
OPERATOR_DEPLOYMENT = ("-n", "memsync-system", "deployment/memsync-operator")
#: The control plane's processes, children of the tier's serve process: command name -> label.
TIER_PROCESSES = {
    "kube-apiserver": "kube-apiserver",
    "etcd": "etcd",
    "kube-controller": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler",
}
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def session(index: int) -> dict[str, Any]:
    """A SessionMemory of the fleet: every one syncs the same store, its sandbox Pod on a kwok Node."""
    container = {"image": "memsync:kind", "command": ["sleep", "infinity"]}
    template = sandbox_template(container, **stages.placement())
    return smem(index, namespace=NAMESPACE, store=stages.STORE_ID, template=template)


def utc_now() -> str:
    """Now as the audit log writes its timestamps (UTC, microseconds, ``Z``): they compare as strings."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def progress(count: int, text: str) -> None:
    print(f"[fleet N={count}] {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


class CpuSamples:
    """The operator's CPU time, sampled every second by a task, with its peak RSS and restarts."""

    def __init__(self, operator: OperatorWatch) -> None:
        self.operator = operator
        self.samples: list[tuple[float, float]] = []

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.operator.sample)
            except (RuntimeError, ValueError, subprocess.SubprocessError) as exc:  # between two containers
                progress(0, f"could not sample the operator: {exc}")
            else:
                self.samples.append((time.monotonic(), self.operator.cpu))
            await asyncio.sleep(1)

    def window(self, start: float, end: float) -> tuple[float, float]:
        """(average, peak over ``PEAK_SPAN_S``) cores between two moments."""
        inside = [(t, c) for t, c in self.samples if start <= t <= end]
        if len(inside) < 2:
            return 0.0, 0.0
        average = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
        peak = 0.0
        j = 0
        for i, (t, c) in enumerate(inside):
            while inside[j][0] < t - PEAK_SPAN_S:
                j += 1
            if i > j and t - inside[j][0] >= PEAK_SPAN_S * 0.8:
                peak = max(peak, (c - inside[j][1]) / (t - inside[j][0]))
        return average, peak


async def report(count: int, fleet: Fleet, every: float = 15) -> None:
    """A progress line every ``every`` seconds until cancelled."""
    while True:
        await asyncio.sleep(every)
        pods, running = fleet.pods_in("Running"), fleet.count(ph.RUNNING)
        progress(count, f"{len(fleet.pods)} Pods, {pods} Running; {running} of {count} sessions Running")


def api_client(info: ClusterInfo) -> KubeApi:
    pki = Path(info.state_dir) / "pki"
    return KubeApi(info.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")


async def deploy(info: ClusterInfo, count: int) -> OperatorWatch:
    """The operator (``manifests/overlays/kind``), the kwok Nodes, the namespace and its Secret."""
    run: Callable[..., str] = lambda *a, **k: kubectl(info, *a, **k)  # noqa: E731
    await asyncio.to_thread(run, "apply", "--server-side", "-k", str(REPO / "manifests/overlays/kind"))
    await asyncio.to_thread(one_replica, info)
    await asyncio.to_thread(
        run,
        *OPERATOR_DEPLOYMENT[:2],
        "rollout",
        "status",
        OPERATOR_DEPLOYMENT[2],
        "--timeout=180s",
        timeout=200,
    )
    nodes = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [stages.node(i) for i in range(stages.node_count(count))],
    }
    await asyncio.to_thread(run, "create", "-f", "-", input=json.dumps(nodes))
    await asyncio.to_thread(run, "create", "namespace", NAMESPACE)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "work", "namespace": NAMESPACE},
        "data": {"work-secret": base64.b64encode(b"not-used-nothing-runs").decode()},
    }
    await asyncio.to_thread(run, "apply", "-f", "-", input=json.dumps(secret))
    return await asyncio.to_thread(OperatorWatch, info)


async def nodes_ready(info: ClusterInfo, count: int, within: float) -> bool:
    def ready() -> int:
        items = json.loads(kubectl(info, "get", "nodes", "-l", "=".join(stages.NODE_LABEL), "-o", "json"))[
            "items"
        ]
        return sum(
            1
            for n in items
            for c in n["status"].get("conditions") or []
            if c["type"] == "Ready" and c["status"] == "True"
        )

    end = time.monotonic() + within
    while time.monotonic() < end:
        if await asyncio.to_thread(ready) >= stages.node_count(count):
            return True
        await asyncio.sleep(1)
    return False


async def measure(info: ClusterInfo, args: argparse.Namespace, count: int, state: Path) -> Result:
    result = Result(count)
    fig = result.figures
    operator = await deploy(info, count)
    api = api_client(info)
    cpu = CpuSamples(operator)
    sampler = asyncio.create_task(cpu.run())
    stub: processes.HealthStub | None = None
    kwok: subprocess.Popen[bytes] | None = None
    try:
        # The stub serves in the operator Pod's network namespace: the Pod IPs (127.100.x.y) are that
        # namespace's own loopback addresses, reached by the operator and nobody else.
        stub = await processes.HealthStub.start(
            Path(f"/proc/{operator.pid}/ns/net"), args.pass_interval, state / "stub.log"
        )
        kwok = processes.start_kwok(processes.kwok_binary(), info.kubeconfig, state, args.kwok_parallelism)
        if not await nodes_ready(info, count, 120):
            raise RuntimeError(f"the kwok Nodes did not turn Ready in 120 s; see {state / 'kwok.log'}")
        async with watching(api, NAMESPACE) as fleet:
            started = time.monotonic()
            progress(count, f"creating {count} SessionMemories on {stages.node_count(count)} kwok Nodes")
            await asyncio.to_thread(create_all, info, count, session)
            fig["created"] = time.monotonic() - started

            reporter = asyncio.create_task(report(count, fleet))
            try:
                exist = await until(lambda: len(fleet.pods) >= count, args.timeout)
                fig["pods exist"] = None if exist is None else time.monotonic() - started
                all_pods = await until(lambda: fleet.pods_in("Running") >= count, args.timeout)
                fig["pods running"] = None if all_pods is None else time.monotonic() - started
                all_running = await until(lambda: fleet.count(ph.RUNNING) >= count, args.timeout)
                fig["all running"] = None if all_running is None else time.monotonic() - started
            finally:
                reporter.cancel()
            if fig["all running"] is None:
                result.notes.append(
                    f"only {fleet.count(ph.RUNNING)} of {count} sessions Running after the timeout"
                )
                return result
            progress(
                count,
                f"every session Running; settling {args.settle:.0f} s, then a {args.window:.0f} s window",
            )
            await asyncio.sleep(args.settle)
            tier = children(info.pid)
            pids = {label: tier[comm] for comm, label in TIER_PROCESSES.items() if comm in tier}
            pids |= {"kwok": kwok.pid, "health stub": stub.proc.pid, "this benchmark": os.getpid()}
            pids["process kubelet (the tier's serve)"] = info.pid
            await steady_window(result, info, (cpu, CpuWindow(pids)), stub, args.window)
            fig["probe timeout"] = args.flip_timeout
            rng = random.Random(args.seed)
            names = rng.sample(sorted(fleet.sessions), min(count, args.flips + args.ends))
            progress(count, f"turning {args.flips} sidecars unhealthy, one every {args.flip_spacing} s")
            health = await flips(
                fleet, stub, names[: args.flips], spacing=args.flip_spacing, within=args.flip_timeout
            )
            fig |= {
                "health p50": health.percentile(50),
                "health p99": health.percentile(99),
                "health n": health.seen,
                "health missed": health.missed,
                "recover p50": health.percentile(50, side=True),
                "recover p99": health.percentile(99, side=True),
            }
            progress(count, f"ending {args.ends} Pods, one every {args.end_spacing} s")
            end = await ends(
                fleet, api, NAMESPACE, names[args.flips :], spacing=args.end_spacing, within=args.flip_timeout
            )
            fig |= {
                "end p50": end.percentile(50),
                "end p99": end.percentile(99),
                "end n": end.seen,
                "end missed": end.missed,
                "kwok end p50": end.percentile(50, side=True),
            }
    finally:
        sampler.cancel()
        if stub is not None:
            await stub.stop()
        processes.stop(kwok)
        await api.aclose()
        operator.sample()
        fig["rss"] = operator.peak
        fig["restarts"] = float(operator.restarts - operator.restarts_before)
    return result


async def steady_window(
    result: Result,
    info: ClusterInfo,
    cpus: tuple[CpuSamples, CpuWindow],
    stub: processes.HealthStub,
    span: float,
) -> None:
    """The operator's CPU, its API requests and the sidecars' /status requests while nothing changes, and
    where the rest of the machine's CPU went."""
    cpu, machine = cpus
    before = await stub.stats()
    since, start = utc_now(), time.monotonic()
    machine.start(start)
    await asyncio.sleep(span)
    until_stamp, end = utc_now(), time.monotonic()
    result.cores = machine.stop(end)
    after = await stub.stats()
    await asyncio.sleep(2)  # the audit log is written a moment after each request
    verbs, _ = await asyncio.to_thread(
        audit_requests, Path(info.state_dir) / "logs" / "audit.log", since, until_stamp
    )
    seconds = end - start
    result.load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    average, peak = cpu.window(start, end)
    served = sum(after["served"].values()) - sum(before["served"].values())
    result.figures |= {
        "window": seconds,
        "cpu average": average,
        "cpu peak": peak,
        "requests": sum(verbs.values()) / seconds,
        "writes": sum(n for v, n in verbs.items() if v.split()[0] in WRITE_VERBS) / seconds,
        "status requests": served / seconds,
        "status waiting": float(after["waiting"]),
    }
    result.verbs = {verb: n / seconds for verb, n in verbs.most_common()}


async def run_one(args: argparse.Namespace, count: int) -> Result:
    with tempfile.TemporaryDirectory(prefix="memsync-fleet-") as tmp:
        state = args.keep / f"n{count}" if args.keep else Path(tmp)
        proc = spawn_serve(state)
        try:
            info = await asyncio.to_thread(wait_ready, state, proc)
            return await measure(info, args, count, state)
        except BaseException:
            for log in ("kwok.log", "stub.log"):
                tail = (state / log).read_text(errors="replace")[-2000:] if (state / log).exists() else ""
                print(f"--- the end of {log}:\n{tail}", file=sys.stderr)
            raise
        finally:
            stop_serve(proc.pid)
            proc.wait(timeout=60)


async def main_async(args: argparse.Namespace) -> int:
    results: list[Result] = []
    for count in args.count or [1000, 5000]:
        results.append(await run_one(args, count))
        print_table(results[-1:])
    if len(results) > 1:
        print()
        print_table(results)
    return 0 if all(r.figures.get("all running") is not None for r in results) else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--count", type=int, action="append", help="sessions (repeatable; default 1000 and 5000)"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="bound on the creation burst (s)")
    parser.add_argument("--settle", type=float, default=30.0, help="wait after every session runs (s)")
    parser.add_argument("--window", type=float, default=90.0, help="the steady-state window (s)")
    parser.add_argument("--flips", type=int, default=50)
    parser.add_argument("--flip-spacing", type=float, default=2.0)
    parser.add_argument(
        "--flip-timeout", type=float, default=600.0, help="bound on each flip and each end (s)"
    )
    parser.add_argument("--ends", type=int, default=50)
    parser.add_argument("--end-spacing", type=float, default=1.0)
    parser.add_argument(
        "--pass-interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help="each sidecar's last successful pass moves on this often (s; 0 keeps it still)",
    )
    parser.add_argument("--kwok-parallelism", type=int, default=16, help="kwok's Pod stage workers")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="keep each run's logs (the cluster tier's, kwok's) under DIR"
    )
    args = parser.parse_args()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
