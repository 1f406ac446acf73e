"""A store server held full on purpose: uploads whose bodies are held back keep its slots, so the next request
is refused by the admission gate (503, or 429 for a credential past its share) as it would be under load."""

from __future__ import annotations

import json
import re
import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from memsync.api.constants import ANTHROPIC_VERSION, MEMORY_BETA

if TYPE_CHECKING:
    from conftest import RunningStoreServer, StoreApi

BODY = json.dumps({"path": "/slow.md", "content": "x"}).encode()


class SlowUpload:
    """A POST whose headers are sent and whose body is held back: the server has admitted it and is
    reading its body, so it holds a slot until ``finish``."""

    def __init__(self, server: RunningStoreServer, path: str, credential: tuple[str, str], name: str) -> None:
        url = urlsplit(server.url)
        body = BODY.replace(b"/slow.md", f"/{name}.md".encode())
        self.rest = body[1:]
        self.sock = socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=30)
        head = [f"POST {path}?beta=true HTTP/1.1", f"host: {url.netloc}", "content-type: application/json"]
        head += [f"anthropic-version: {ANTHROPIC_VERSION}", f"anthropic-beta: {MEMORY_BETA}"]
        head += [f"{credential[0]}: {credential[1]}", f"content-length: {len(body)}", "", ""]
        self.sock.sendall("\r\n".join(head).encode() + body[:1])

    def finish(self) -> int:
        self.sock.sendall(self.rest)
        answer = b""
        while b"\r\n" not in answer:
            chunk = self.sock.recv(4096)
            assert chunk, "the server closed the connection without an answer"
            answer += chunk
        self.sock.close()
        return int(answer.split(b" ", 2)[1])


def gauge(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{name} is not in /metrics"
    return float(match.group(1))


def wait_in_flight(api: StoreApi, expected: float, queued: float = 0) -> None:
    """Until /metrics shows the slow uploads admitted (and queued): they are sent, not yet seen."""
    for _ in range(600):
        text = api.anon("GET", "/metrics").text
        if (
            gauge(text, "memsync_store_requests_in_flight") == expected
            and gauge(text, "memsync_store_requests_queued") == queued
        ):
            return
        api.anon("GET", "/healthz")  # a short pause that is itself a request the gate must let through
    raise AssertionError(f"the server never showed {expected} requests in flight and {queued} queued")
