"""The fleet benchmark's own processes: kwok (the simulated nodes) and the health stub (every sidecar's
``/status``), each started here and stopped by its PID."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleet import stages

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tests" / "tools" / "build.sh"
STUB = Path(__file__).resolve().with_name("health_stub.py")


def kwok_binary() -> Path:
    """kwok, built from tests/tools/kwok (``make tools``; built here on first use, a few minutes)."""
    built = subprocess.run([str(BUILD), "kwok"], stdout=subprocess.PIPE, text=True, check=False, timeout=1800)
    if built.returncode != 0:
        raise RuntimeError("kwok could not be built (tests/tools/build.sh kwok; it needs Go)")
    return Path(built.stdout.strip().splitlines()[-1])


def start_kwok(binary: Path, kubeconfig: str, state: Path, pod_parallelism: int) -> subprocess.Popen[bytes]:
    """kwok as a plain process on this machine, against the API server of ``kubeconfig``.

    Its HOME is a fresh folder: kwok also reads ``~/.kwok/kwok.yaml`` when there is one."""
    home = state / "kwok-home"
    home.mkdir(parents=True, exist_ok=True)
    config = state / "kwok.yaml"
    config.write_text(stages.kwok_config(pod_parallelism))
    log = (state / "kwok.log").open("ab")
    return subprocess.Popen(
        [str(binary), f"--kubeconfig={kubeconfig}", f"--config={config}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes] | None, timeout: float = 15) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


class HealthStub:
    """``health_stub.py`` in the network namespace ``netns`` (a ``/proc/PID/ns/net`` or ``/run/netns`` path),
    driven over its standard input."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._lock = asyncio.Lock()

    @classmethod
    async def start(cls, netns: Path, pass_interval: float, log: Path) -> HealthStub:
        with log.open("ab") as err:
            proc = await asyncio.create_subprocess_exec(
                "nsenter",
                f"--net={netns}",
                "--",
                sys.executable,
                str(STUB),
                "--pass-interval",
                str(pass_interval),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        stub = cls(proc)
        try:
            line = await stub._line(within=60)
        except BaseException:
            await stub.stop()
            raise
        if not line.startswith("ready"):
            await stub.stop()
            raise RuntimeError(f"the health stub did not start: {line!r} (see {log})")
        return stub

    async def _line(self, within: float = 30) -> str:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), within)
        if not raw:
            raise RuntimeError(f"the health stub exited ({self.proc.returncode})")
        return raw.decode().strip()

    async def command(self, *words: str) -> str:
        assert self.proc.stdin is not None
        async with self._lock:
            self.proc.stdin.write((" ".join(words) + "\n").encode())
            await self.proc.stdin.drain()
            return await self._line()

    async def set_healthy(self, address: str, healthy: bool) -> None:
        answer = await self.command("healthy" if healthy else "unhealthy", address)
        if not answer.startswith("ok"):
            raise RuntimeError(f"the health stub refused: {answer}")

    async def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(await self.command("stats"))
        return result

    async def stop(self) -> None:
        if self.proc.returncode is not None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the stub ends when its standard input does
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()
