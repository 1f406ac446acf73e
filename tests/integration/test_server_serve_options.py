"""``memsync store serve`` options that change how it runs: several worker processes, and HTTPS."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from conftest import API_HEADERS, STARTUP_TIMEOUT_S, StoreApi, free_port, launch_on_backend
from memsync.api.secret import decode_work_secret
from support.server_process import spawn_store_server, stop_process

pytestmark = pytest.mark.both_backends


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_several_workers_share_the_port_and_the_database(
    store_backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    server = launch_on_backend(store_backend, request, tmp_path / "srv", ("--workers", "2"))
    try:
        assert server.process is not None
        assert len(_children(server.process.pid)) >= 2  # the worker processes (and no more than a helper)
        api = StoreApi(server)
        try:
            store = api.new_store()
            for i in range(20):  # new connections each time: the kernel spreads them over the workers
                with httpx.Client(base_url=server.url, headers=API_HEADERS, timeout=30.0) as fresh:
                    resp = fresh.post(
                        f"/v1/memory_stores/{store}/memories",
                        params={"beta": "true"},
                        json={"path": f"/n{i:02d}", "content": str(i)},
                        headers={"x-api-key": server.admin_key},
                    )
                    assert resp.status_code == 200, resp.text
            assert api.paths(store) == [f"/n{i:02d}" for i in range(20)]
        finally:
            api.close()
    finally:
        server.stop()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def test_tls_serves_https_and_puts_https_into_minted_secrets(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    port = free_port()
    admin_key = "sk-ant-admin-test-tls-0123456789abcdef"
    process = spawn_store_server(
        port=port,
        db_path=tmp_path / "store.db",
        log_path=tmp_path / "server.log",
        env={**os.environ, "MEMSYNC_ADMIN_KEY": admin_key},
        extra_args=("--ssl-certfile", str(cert), "--ssl-keyfile", str(key)),
    )
    url = f"https://127.0.0.1:{port}"
    try:
        with httpx.Client(
            base_url=url,
            verify=ssl.create_default_context(cafile=str(cert)),
            headers=API_HEADERS,
            timeout=10.0,
        ) as https:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while True:
                assert process.poll() is None, (tmp_path / "server.log").read_text()
                try:
                    if https.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                    time.sleep(0.1)
            headers = {"x-api-key": admin_key}
            store = https.post("/v1/memory_stores", json={"name": "tls"}, headers=headers).json()["id"]
            minted = https.post(
                "/v1/memsync/sessions", json={"resources": [{"memory_store_id": store}]}, headers=headers
            )
            assert decode_work_secret(minted.json()["work_secret"]).api_base_url == url
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5.0)  # no plain HTTP on the TLS port
    finally:
        stop_process(process)


def test_half_a_tls_configuration_is_refused(tmp_path: Path) -> None:
    cert, _ = _self_signed(tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "memsync",
            "store",
            "serve",
            "--db",
            str(tmp_path / "s.db"),
            "--ssl-certfile",
            str(cert),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "MEMSYNC_ADMIN_KEY": "k"},
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--ssl-certfile and --ssl-keyfile go together" in result.stderr
