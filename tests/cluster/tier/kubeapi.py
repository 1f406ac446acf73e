"""A small async Kubernetes API client over httpx with a client certificate: what the process kubelet
needs (get, create, patch, delete, watch). Errors carry the API's status message."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class KubeApi:
    def __init__(self, server: str, ca: Path, cert: Path, key: Path) -> None:
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        self._http = httpx.AsyncClient(
            base_url=server, verify=context, timeout=httpx.Timeout(30.0, read=None), http2=False
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        resp = await self._http.request(
            method,
            path,
            params=params,
            content=None if body is None else json.dumps(body),
            headers={"Content-Type": content_type},
        )
        if resp.status_code >= 400:
            try:
                message = resp.json().get("message", resp.text)
            except ValueError:
                message = resp.text
            raise ApiError(resp.status_code, message)
        result: dict[str, Any] = resp.json()
        return result

    async def get(self, path: str, **params: str) -> dict[str, Any]:
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: Any) -> dict[str, Any]:
        return await self.request("POST", path, body=body)

    async def patch(self, path: str, body: Any, *, strategic: bool = True) -> dict[str, Any]:
        kind = "strategic-merge-patch" if strategic else "merge-patch"
        return await self.request("PATCH", path, body=body, content_type=f"application/{kind}+json")

    async def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        return await self.request("DELETE", path, body=body)

    async def watch(self, path: str, **params: str) -> AsyncIterator[dict[str, Any]]:
        """List, then watch from that resourceVersion; yields ``{"type", "object"}`` (the list as ADDED).

        Returns when the server ends the watch; the caller loops."""
        listing = await self.get(path, **params)
        for item in listing.get("items", []):
            yield {"type": "ADDED", "object": item}
        query = {**params, "watch": "1", "resourceVersion": listing["metadata"]["resourceVersion"]}
        query["allowWatchBookmarks"] = "true"
        async with self._http.stream("GET", path, params=query) as resp:
            if resp.status_code >= 400:
                raise ApiError(resp.status_code, (await resp.aread()).decode(errors="replace"))
            async for line in resp.aiter_lines():
                if not line:
                    continue
                event: dict[str, Any] = json.loads(line)
                if event["type"] == "ERROR":
                    return
                if event["type"] != "BOOKMARK":
                    yield event
