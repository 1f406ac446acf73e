"""A throwaway PostgreSQL server for tests and benchmarks: ``initdb`` into a temporary directory, then
``postgres`` on a free loopback port (and a unix socket in the same directory), trust authentication.

The binaries come from ``MEMSYNC_PG_BIN``, Debian's ``postgresql-NN`` package (the newest
``/usr/lib/postgresql/NN/bin``) or ``PATH``. PostgreSQL refuses to run as root: as root, the cluster is made
and run as the ``postgres`` user when it exists, else as ``nobody``, through ``setpriv`` (util-linux); the
directory is created for that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from support.server_process import HOST, free_port

PG_BIN_ENV = "MEMSYNC_PG_BIN"
SUPERUSER = "memsync"
STARTUP_TIMEOUT_S = 60.0
MISSING = (
    "PostgreSQL server binaries (initdb, postgres) not found: install Debian's postgresql package "
    f"(apt-get install postgresql) or set {PG_BIN_ENV} to their directory"
)


def find_pg_bin() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``; None when PostgreSQL is not installed."""
    explicit = os.environ.get(PG_BIN_ENV)
    candidates = [Path(explicit)] if explicit else []
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(debian)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "postgres").is_file():
            return candidate
    return None


def _run_as() -> tuple[list[str], int, int]:
    """(command prefix, uid, gid) to run PostgreSQL as a non-root user."""
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()
    for name in ("postgres", "nobody"):
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            continue
        prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
        return prefix, user.pw_uid, user.pw_gid
    raise RuntimeError(
        "running as root and neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL"
    )


class PostgresServer:
    """One PostgreSQL cluster. ``start()``, then ``new_database()`` per test server; ``stop()`` removes it."""

    def __init__(self, bin_dir: Path, *, durable: bool = False, max_connections: int = 300) -> None:
        self.bin_dir = bin_dir
        self.durable = durable
        self.max_connections = max_connections
        self.port = 0
        self.directory: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._databases = 0

    @property
    def admin_url(self) -> str:
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{database}"

    def start(self) -> PostgresServer:
        prefix, uid, gid = _run_as()
        self.directory = Path(tempfile.mkdtemp(prefix="memsync-pg-"))
        os.chown(self.directory, uid, gid)
        data = self.directory / "data"
        log = self.directory / "postgres.log"
        subprocess.run(
            [
                *prefix,
                str(self.bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        settings = [f"max_connections={self.max_connections}", "listen_addresses=" + HOST]
        if not self.durable:  # a test cluster: durability buys nothing and costs I/O on a shared machine
            settings += ["fsync=off", "synchronous_commit=off", "full_page_writes=off"]
        for attempt in range(5):
            self.port = free_port()
            args = [*prefix, str(self.bin_dir / "postgres"), "-D", str(data), "-p", str(self.port)]
            args += ["-k", str(self.directory)]
            for setting in settings:
                args += ["-c", setting]
            with log.open("ab") as out:
                os.chown(log, uid, gid)
                self.process = subprocess.Popen(
                    args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            if self._wait_ready(log):
                return self
            self._halt()
            if attempt == 4 or "already in use" not in log.read_text(errors="replace"):
                break
        text = log.read_text(errors="replace")
        self.stop()
        raise RuntimeError(f"PostgreSQL did not start:\n{text}")

    def _wait_ready(self, log: Path) -> bool:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            try:
                with psycopg.connect(self.admin_url, connect_timeout=2):
                    return True
            except psycopg.OperationalError:
                time.sleep(0.1)
        return False

    def new_database(self, prefix: str = "store") -> str:
        """A fresh, empty database; its URL."""
        self._databases += 1
        name = f"{prefix}_{self._databases}_{os.getpid()}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _halt(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # "fast" shutdown
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def stop(self) -> None:
        self._halt()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
