"""The pooled transport under StoreClient, against the real store server."""

import asyncio

import httpx
import pytest

from memsync.client import StoreClient, errors
from memsync.client.transport import PooledTransport, default_ssl_context


async def test_requests_spread_over_small_pools_and_release_them(store_server) -> None:
    transport = PooledTransport(max_connections=16, pool_size=8)
    async with StoreClient(store_server.url, api_key=store_server.admin_key, transport=transport) as client:
        store = await client.create_store("transport spread")
        stores = await asyncio.gather(*(client.get_store(store.id) for _ in range(48)))
        assert {s.id for s in stores} == {store.id}
        assert transport._busy == [0, 0]  # every response closed gave its slot back
        # Both pools carried traffic: each holds open keep-alive connections now.
        assert all(len(pool._pool.connections) > 0 for pool in transport._pools)
        assert all(len(pool._pool.connections) <= 8 for pool in transport._pools)


async def test_a_failed_request_gives_its_slot_back(store_server) -> None:
    transport = PooledTransport(max_connections=8)
    async with StoreClient(store_server.url, api_key=store_server.admin_key, transport=transport) as client:
        with pytest.raises(errors.NotFound):
            await client.get_store("memstore_does_not_exist")
    assert transport._busy == [0]

    dead = PooledTransport(max_connections=8)
    async with StoreClient("http://127.0.0.1:9", api_key="k", transport=dead, max_retries=0) as client:
        with pytest.raises(errors.TransportError):
            await client.get_store("memstore_x")
    assert dead._busy == [0]


def test_pool_sizes_cover_the_requested_total() -> None:
    for total, pools in [(1, 1), (8, 1), (9, 2), (64, 8), (100, 13)]:
        transport = PooledTransport(max_connections=total)
        assert len(transport._pools) == pools
        assert transport._pools[0]._pool._max_connections * pools >= total
    assert default_ssl_context() is default_ssl_context()  # the CA bundle is loaded once per process
    assert isinstance(default_ssl_context(), type(httpx.create_ssl_context()))
