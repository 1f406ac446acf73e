"""Which requests the conditional-probe fast path takes (the rest go through the router unchanged)."""

from __future__ import annotations

from typing import Any

import pytest

from memsync.server.http.probe import probe_request

PATH = "/v1/memory_stores/memstore_1/memories"


def scope(
    *, method: str = "GET", path: str = PATH, query: bytes = b"beta=true&limit=1", headers: Any = None
) -> dict[str, Any]:
    if headers is None:
        headers = [(b"authorization", b"Bearer tok"), (b"if-none-match", b'W/"abc"')]
    return {"type": "http", "method": method, "path": path, "query_string": query, "headers": headers}


def test_the_sidecars_probe_is_taken() -> None:
    assert probe_request(scope()) == ("memstore_1", None, 1, 'W/"abc"', None, "Bearer tok")
    admin = [(b"x-api-key", b"sk-admin"), (b"if-none-match", b"*")]
    assert probe_request(scope(query=b"", headers=admin)) == ("memstore_1", None, None, "*", "sk-admin", None)
    # what the store client's probe sends (memsync.client: view=basic, limit=1)
    sidecar = scope(query=b"view=basic&limit=1&beta=true")
    assert probe_request(sidecar) == ("memstore_1", "basic", 1, 'W/"abc"', None, "Bearer tok")
    assert probe_request(scope(query=b"view=full")) == (
        "memstore_1",
        "full",
        None,
        'W/"abc"',
        None,
        "Bearer tok",
    )


@pytest.mark.parametrize(
    "changed",
    [
        {"method": "POST"},
        {"path": "/v1/memory_stores/memstore_1/memories/mem_1"},
        {"path": "/v1/memory_stores/a%2Fb/memories"},
        {"headers": [(b"authorization", b"Bearer tok")]},  # not conditional
        {"headers": [(b"if-none-match", b"a"), (b"if-none-match", b"b")]},  # repeated header
        {"query": b"beta=true&limit=1&path_prefix=/a/"},
        {"query": b"limit=1&limit=2"},
        {"query": b"limit=-1"},
        {"query": b"limit=abc"},
        {"query": b"limit=99999999"},
        {"query": b"view=everything"},
        {"query": b"view=basic&view=full"},
        {"query": b"page=abc"},
    ],
)
def test_anything_else_goes_the_ordinary_way(changed: dict[str, Any]) -> None:
    assert probe_request(scope(**changed)) is None
