"""StoreClient honours the environment's proxy and CA settings on every pool, against the real store server, a
real forward proxy (absolute-form HTTP and CONNECT tunnels) and a real TLS endpoint signed by a test CA."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from conftest import RunningStoreServer
from memsync.client import StoreClient, errors
from memsync.client.transport import default_ssl_context

PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter], b: tuple[asyncio.StreamReader, asyncio.StreamWriter]
) -> None:
    await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))


class ForwardProxy:
    """A minimal HTTP forward proxy on loopback that records what it forwarded: ``GET host:port/path`` for an
    absolute-form request (answered over a fresh upstream connection, ``Connection: close``), ``CONNECT
    host:port`` for a tunnel."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ")
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            self.seen.append(f"CONNECT {target}")
            upstream = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await _splice((reader, writer), upstream)
            return
        url = httpx.URL(target)
        self.seen.append(f"{method} {url.host}:{url.port}{url.raw_path.decode()}")
        kept = [
            line
            for line in header_lines
            if line and line.split(":", 1)[0].lower() not in ("connection", "proxy-connection", "keep-alive")
        ]
        upstream = await asyncio.open_connection(url.host, url.port)
        rewritten = "\r\n".join([f"{method} {url.raw_path.decode()} {version}", *kept, "Connection: close"])
        upstream[1].write(rewritten.encode("latin-1") + b"\r\n\r\n")
        await _splice((reader, writer), upstream)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No proxy or CA setting from the machine leaks in; the cached SSL context is rebuilt per test."""
    for name in PROXY_ENV:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    default_ssl_context.cache_clear()
    yield monkeypatch
    default_ssl_context.cache_clear()


async def test_http_proxy_carries_every_request_from_every_pool(
    store_server: RunningStoreServer, clean_env: pytest.MonkeyPatch
) -> None:
    async with ForwardProxy() as proxy:
        clean_env.setenv("HTTP_PROXY", proxy.url)
        async with StoreClient(
            store_server.url, api_key=store_server.admin_key, max_connections=64
        ) as client:
            store = await client.create_store("via proxy")
            # 40 at once: the least-busy choice spreads them over all eight pools of 8.
            got = await asyncio.gather(*(client.get_store(store.id) for _ in range(40)))
            assert {s.id for s in got} == {store.id}
            sent = client.request_count
    authority = store_server.url.removeprefix("http://")
    assert len(proxy.seen) == sent == 41
    assert proxy.seen[0] == f"POST {authority}/v1/memory_stores?beta=true"
    assert all(seen.startswith(("POST", "GET")) and authority in seen for seen in proxy.seen)


async def test_no_proxy_bypasses_the_proxy(
    store_server: RunningStoreServer, clean_env: pytest.MonkeyPatch
) -> None:
    async with ForwardProxy() as proxy:
        clean_env.setenv("HTTP_PROXY", proxy.url)
        clean_env.setenv("NO_PROXY", "example.internal,127.0.0.1")
        async with StoreClient(store_server.url, api_key=store_server.admin_key) as client:
            store = await client.create_store("direct")
            assert (await client.get_store(store.id)).id == store.id
    assert proxy.seen == []


async def test_a_dead_proxy_is_really_in_the_path(
    store_server: RunningStoreServer, clean_env: pytest.MonkeyPatch
) -> None:
    async with ForwardProxy() as proxy:
        dead = proxy.url
    clean_env.setenv("HTTP_PROXY", dead)  # nothing listens there any more
    async with StoreClient(store_server.url, api_key=store_server.admin_key, max_retries=0) as client:
        with pytest.raises(errors.TransportError):
            await client.get_store("memstore_x")


# --- HTTPS through a CONNECT tunnel, verified against SSL_CERT_FILE ---------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A throwaway CA and a ``localhost`` server certificate it signed: (ca.pem, server.pem, server.key)."""
    d = tmp_path_factory.mktemp("ca")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=memsync test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)  # fmt: skip
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)  # fmt: skip
    return d / "ca.pem", d / "server.pem", d / "server.key"


@contextlib.asynccontextmanager
async def tls_front(store: RunningStoreServer, cert: Path, key: Path) -> AsyncIterator[str]:
    """TLS on a loopback port, spliced to the plain-HTTP store server; yields ``https://localhost:PORT``."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await asyncio.open_connection("127.0.0.1", store.port)
        await _splice((reader, writer), upstream)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    try:
        yield f"https://localhost:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def test_https_goes_through_a_connect_tunnel_and_trusts_ssl_cert_file(
    store_server: RunningStoreServer, clean_env: pytest.MonkeyPatch, test_ca: tuple[Path, Path, Path]
) -> None:
    ca, cert, key = test_ca
    async with ForwardProxy() as proxy, tls_front(store_server, cert, key) as https_url:
        clean_env.setenv("HTTPS_PROXY", proxy.url)
        clean_env.setenv("SSL_CERT_FILE", str(ca))
        async with StoreClient(https_url, api_key=store_server.admin_key) as client:
            store = await client.create_store("over tls")
            assert (await client.get_store(store.id)).name == "over tls"
        assert proxy.seen and all(
            seen == f"CONNECT {https_url.removeprefix('https://')}" for seen in proxy.seen
        )

        # Without the CA the same endpoint is refused: the setting is what made it trusted.
        clean_env.delenv("SSL_CERT_FILE")
        default_ssl_context.cache_clear()
        async with StoreClient(https_url, api_key=store_server.admin_key, max_retries=0) as client:
            with pytest.raises(errors.TransportError) as refused:
                await client.get_store("memstore_x")
        assert "CERTIFICATE_VERIFY_FAILED" in repr(refused.value.__cause__) or "certificate" in str(
            refused.value
        )
