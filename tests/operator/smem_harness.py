"""Helpers of the operator tier: kopf against kmock's KubernetesEmulator (a real HTTP server on loopback).

kmock's emulator is "a Kubernetes-like database over HTTP". ``MemsyncEmulator`` adds the few API-server
behaviours the controller's correctness depends on, so the tests can fail where a real cluster would:

- ``metadata.uid``, ``creationTimestamp``, ``generation`` and ``generateName`` on create;
- a ``resourceVersion`` bumped on every write, honoured as a precondition in merge patches and in kopf's
  JSON-patch ``test`` operations (kmock alone never changes it, so kopf's consistency checks and our
  optimistic status writes would pass vacuously);
- ``generation`` bumped when ``spec`` changes;
- the status subresource: a patch of the main resource cannot change ``status``, a patch of ``/status``
  can change nothing else; and status fields the CRD does not declare are pruned (as the API server does);
- DeleteOptions ``preconditions.uid``;
- ``/version`` answers a supported release (``server_version``);
- refusals on demand: a Pod create or Secret read answered with a 4xx, as admission or RBAC answers it;
- graceful Pod deletion: a Pod is not removed at once but gets ``deletionTimestamp`` (kmock does that only
  for objects with finalizers, so every Pod carries a test-only finalizer, ``KUBELET_FINALIZER``); the test
  then plays the kubelet (final container statuses, then removing the finalizer removes the Pod); a force
  deletion (``gracePeriodSeconds: 0``, which the API server carries out at once) is recorded in
  ``force_deleted``, and the test removes the Pod;
- Nodes (cluster-scoped), which a test creates with the conditions and taints it needs.

Everything else (watch, list, get, merge and JSON patches) is kmock's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import itertools
import json
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kmock as km
import kopf
import yaml
from aiohttp import web
from kmock._internal import enums, rendering

from memsync.controller import runtime
from memsync.controller.kube import KubeApi
from memsync.controller.leadership.fence import Fence
from memsync.controller.runtime import Process
from memsync.controller.settings import (
    ControllerConfig,
    WatchTimeouts,
    configure_settings,
)
from memsync.crd.models import API_VERSION, GROUP, KIND, PLURAL, VERSION, sandbox_template
from memsync.crd.schema import build_crd

NAMESPACE = "agents"
KUBELET_FINALIZER = "kubelet.memsync.test/graceful-termination"
SMEM = f"{GROUP}/{VERSION}/{PLURAL}"
AGENT_IMAGE = "registry.test/memsync:test"

POD_RES = km.resource("v1/pods")
EVENT_RES = km.resource("v1/events")
SECRET_RES = km.resource("v1/secrets")
SMEM_RES = km.resource(SMEM)
LEASES = "coordination.k8s.io/v1/leases"
LEASE_RES = km.resource(LEASES)


class _ResourceVersions:
    """One cluster-wide, ever-increasing resourceVersion sequence (as etcd's revision)."""

    def __init__(self) -> None:
        self._counter = itertools.count(1000)
        self.current = 999

    def next(self) -> str:
        self.current = next(self._counter)
        return str(self.current)


_rv = _ResourceVersions()


def _now() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _prune(value: Any, schema: dict[str, Any]) -> Any:
    """Drop what a structural schema does not declare (x-kubernetes-preserve-unknown-fields keeps it)."""
    if value is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        return {k: _prune(v, props[k]) for k, v in value.items() if k in props}
    if isinstance(value, list) and "items" in schema:
        return [_prune(v, schema["items"]) for v in value]
    return value


_STATUS_SCHEMA = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]


def _require_version(current: dict[str, Any], wanted: Any) -> None:
    """The API server's optimistic lock: a write naming a resourceVersion other than the object's is a 409."""
    if wanted != current["metadata"].get("resourceVersion"):
        raise km.KubernetesError(
            status=409, reason="Conflict", message="the object has been modified; please apply again"
        )


class MemsyncEmulator(km.KubernetesEmulator):
    """kmock's KubernetesEmulator plus the API-server behaviours listed in the module docstring.

    ``refuse_status_writes``: the next N writes of a SessionMemory's status subresource fail with a 500
    (an API server or etcd hiccup), so tests can show what a lost status write costs.
    """

    refuse_status_writes: int = 0
    #: While set, every Pod create (``reject_pod_creates``) or Secret read (``reject_secret_reads``) is
    #: answered with this error, as admission (Pod Security, quota) or RBAC would answer it.
    reject_pod_creates: km.KubernetesError | None = None
    reject_secret_reads: km.KubernetesError | None = None
    rejected: int = 0  # how many requests were answered with one of those

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The Pods deleted with ``gracePeriodSeconds: 0`` (a force deletion), by name.
        self.force_deleted: list[str] = []

    #: What ``/version`` answers (kmock's own default is an old 1.26).
    server_version: tuple[str, str] = ("1", "36")

    async def _serve_server_version(self, request: rendering.Request) -> Any:
        payload = await super()._serve_server_version(request)
        major, minor = self.server_version
        return {**payload, "major": major, "minor": minor, "gitVersion": f"v{major}.{minor.rstrip('+')}.0"}

    #: Resources (``POD_RES``...) every request of which is answered 403 Forbidden, as RBAC answers once the
    #: operator's RoleBinding in the namespace is gone.
    forbidden: frozenset[Any] = frozenset()

    async def _handle(self, request: rendering.Request) -> Any:
        while self.mute_watches and str(request.params.get("watch")) in ("true", "1"):
            await asyncio.sleep(0.1)  # no answer, not even its headers
        if request.resource is not None:
            if request.resource in self.forbidden:
                raise km.KubernetesError(
                    status=403,
                    reason="Forbidden",
                    message=f'{request.resource} is forbidden: User "system:serviceaccount:memsync-system:'
                    'memsync-operator" cannot access it in the namespace',
                )
            if request.method == enums.method.PUT and request.resource == LEASE_RES and request.name:
                return self._replace(request)  # kmock serves no PUT; the leader election replaces Leases
            self._emulate(request)
        return await super()._handle(request)

    def _replace(self, request: rendering.Request) -> web.Response:
        """PUT of a whole object, as the API server does it: 404 when absent, 409 when the body's
        resourceVersion is not the object's, else the body with a new resourceVersion."""
        current = self._current(request)
        if current is None:
            raise km.KubernetesError(status=404, reason="NotFound", message=f"{request.name} not found")
        body = copy.deepcopy(request.data) if isinstance(request.data, dict) else {}
        meta = body.setdefault("metadata", {})
        _require_version(current, meta.get("resourceVersion"))  # a PUT always carries the one it read
        keep = ("uid", "creationTimestamp", "namespace", "name")
        meta |= {k: current["metadata"][k] for k in keep if k in current["metadata"]}
        meta["resourceVersion"] = _rv.next()
        self.objects[(request.resource, request.namespace, request.name)].create(body)
        return web.json_response(body)

    async def _serve_list(self, request: rendering.Request) -> Any:
        payload = await super()._serve_list(request)
        payload["metadata"] = {"resourceVersion": str(_rv.current)}
        return payload

    #: While set, a new watch gets no answer at all and a running one sends nothing more (a stalled
    #: connection, or a stuck API server: what the operator's liveness probe must notice).
    mute_watches: bool = False

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[Any]:
        """A watch from resourceVersion N sends only what changed after N (kmock replays everything), and
        ends after its ``timeoutSeconds``, as the API server ends it (the client then watches again)."""
        since = str(request.params.get("resourceVersion") or "")
        floor = int(since) if since.isdigit() else None
        loop = asyncio.get_running_loop()
        timeout = str(request.params.get("timeoutSeconds") or "")
        deadline = loop.time() + int(timeout) if timeout.isdigit() else None
        events = self._watch_events(request).__aiter__()
        while True:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return
            try:
                event = await asyncio.wait_for(events.__anext__(), left)
            except (StopAsyncIteration, TimeoutError):
                return
            while self.mute_watches:
                await asyncio.sleep(0.1)
            if floor is not None and isinstance(event, dict):
                version = str(
                    ((event.get("object") or {}).get("metadata") or {}).get("resourceVersion") or ""
                )
                if version.isdigit() and int(version) <= floor:
                    continue
            yield event

    async def _watch_events(self, request: rendering.Request) -> AsyncIterator[Any]:
        """kmock's watch without its gap: kmock lists the objects, sends them, and only then joins the event
        bus, so a change made in between was never sent (a SessionMemory's finalizer patch, now and then:
        the session never started). Here the bus position is taken under the same lock as the list, and
        every change after the list follows it."""
        yield b""  # the headers go out at once
        assert request.resource is not None
        async with self._lock:
            mark = await self._buses[request.resource].mark()
            listed = self._KubernetesEmulator__get_objs(request, strict=False)  # type: ignore[attr-defined]
            events = [{"type": "ADDED", "object": obj.raw} for obj in listed if not obj.deleted]
        for event in events:
            yield event
        check = self._KubernetesEmulator__check  # type: ignore[attr-defined]
        async for event in mark:
            meta = (event.get("object") or {}).get("metadata") or {}
            if check(request, request.resource, meta.get("namespace"), meta.get("name"), strict=False):
                yield event

    def _has_status_subresource(self, resource: Any) -> bool:
        return resource in self.resources and "status" in self.resources[resource].subresources

    def _current(self, request: rendering.Request) -> dict[str, Any] | None:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects:
            return None
        obj = self.objects[key]
        return None if obj.deleted else copy.deepcopy(obj.raw)

    def _emulate(self, request: rendering.Request) -> None:
        resource = request.resource
        data = request.data
        if request.action == enums.action.CREATE and resource == POD_RES and self.reject_pod_creates:
            self.rejected += 1
            raise self.reject_pod_creates
        if request.action == enums.action.FETCH and resource == SECRET_RES and self.reject_secret_reads:
            self.rejected += 1
            raise self.reject_secret_reads
        if request.action == enums.action.CREATE and isinstance(data, dict):
            meta = data.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
            meta.setdefault("namespace", request.namespace)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            meta["resourceVersion"] = _rv.next()
            meta["generation"] = 1
            if self._has_status_subresource(resource):
                data.pop("status", None)
            if resource == POD_RES:
                meta["finalizers"] = [*meta.get("finalizers", []), KUBELET_FINALIZER]
        elif request.action == enums.action.UPDATE and request.name is not None:
            current = self._current(request)
            if current is None:
                return  # kmock answers 404
            if resource == SMEM_RES and request.subresource == "status" and self.refuse_status_writes > 0:
                self.refuse_status_writes -= 1
                raise km.KubernetesError(status=500, reason="InternalError", message="injected: etcd timeout")
            self._patch(request, resource, current, data)
        elif request.action == enums.action.DELETE and request.name is not None:
            self._delete(request, data)

    def _delete(self, request: rendering.Request, data: Any) -> None:
        resource = request.resource
        current = self._current(request)
        if current is None:
            return
        options = data if isinstance(data, dict) else {}
        want_uid = (options.get("preconditions") or {}).get("uid")
        if want_uid and want_uid != current["metadata"].get("uid"):
            raise km.KubernetesError(status=409, reason="Conflict", message="precondition failed: uid")
        meta = current.get("metadata", {})
        stamp: dict[str, Any] = {"resourceVersion": _rv.next()}
        if resource == POD_RES and options.get("gracePeriodSeconds") == 0:
            self.force_deleted.append(str(request.name))  # the test then removes it (``remove_pod``)
        if meta.get("deletionTimestamp"):
            return  # already terminating: nothing changes
        if resource == POD_RES and meta.get("finalizers"):
            grace = options.get("gracePeriodSeconds")
            if grace is None:
                grace = (current.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            stamp["deletionGracePeriodSeconds"] = grace
        self.objects[(resource, request.namespace, request.name)].patch({"metadata": stamp})

    def _patch(self, request: rendering.Request, resource: Any, current: dict[str, Any], data: Any) -> None:
        rv = _rv.next()
        on_status = request.subresource == "status"
        guarded = self._has_status_subresource(resource)
        if isinstance(data, dict):
            wanted_rv = (data.get("metadata") or {}).get("resourceVersion")
            if wanted_rv is not None:
                _require_version(current, wanted_rv)
            if on_status:
                for key in list(data):
                    if key != "status":
                        del data[key]
                if resource == km.resource(SMEM) and isinstance(data.get("status"), dict):
                    data["status"] = _prune(data["status"], _STATUS_SCHEMA)
            elif guarded:
                data.pop("status", None)
            meta = data.setdefault("metadata", {})
            meta["resourceVersion"] = rv
            if "spec" in data and not on_status:
                new_spec = _merge(current.get("spec"), data["spec"])
                if new_spec != current.get("spec"):
                    meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
        elif isinstance(data, list):
            ops = [op for op in data if isinstance(op, dict)]
            for op in ops:
                if (
                    op.get("op") == "test"
                    and op.get("path") == "/metadata/resourceVersion"
                    and op.get("value") != current["metadata"].get("resourceVersion")
                ):
                    # What the API server answers when a JSON-patch test fails (kopf expects it).
                    raise km.KubernetesError(
                        status=422, reason="Invalid", message="the test operation failed"
                    )
            if on_status:
                ops = [
                    op
                    for op in ops
                    if str(op.get("path", "")).startswith("/status") or op.get("op") == "test"
                ]
            elif guarded:
                ops = [op for op in ops if not str(op.get("path", "")).startswith("/status")]
            if any(str(op.get("path", "")).startswith("/spec") and op.get("op") != "test" for op in ops):
                generation = int(current["metadata"].get("generation", 1)) + 1
                ops.append({"op": "add", "path": "/metadata/generation", "value": generation})
            ops.append({"op": "add", "path": "/metadata/resourceVersion", "value": rv})
            data[:] = ops


# --------------------------------------------------------------------------------------------------
# Fixtures and helpers
# --------------------------------------------------------------------------------------------------


_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}


def declare_resources(kmock: km.KubernetesEmulator) -> None:
    """Discovery: what kopf needs to start watching (namespaces and CRDs, even unused), and our kinds."""
    # The official client asks for "/version/" (the API server serves both spellings; kmock only one).
    kmock.fallback["get /version/"] << kmock._serve_server_version
    kmock.resources["v1/namespaces"] = km.ResourceInfo(kind="Namespace", namespaced=False, verbs=_VERBS)
    kmock.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = km.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False, verbs=_VERBS
    )
    kmock.resources["v1/pods"] = km.ResourceInfo(
        kind="Pod", namespaced=True, verbs=_VERBS, subresources={"status"}
    )
    kmock.resources["v1/secrets"] = km.ResourceInfo(kind="Secret", namespaced=True, verbs=_VERBS)
    kmock.resources["v1/events"] = km.ResourceInfo(kind="Event", namespaced=True, verbs=_VERBS)
    kmock.resources["v1/nodes"] = km.ResourceInfo(kind="Node", namespaced=False, verbs=_VERBS)
    kmock.resources[SMEM] = km.ResourceInfo(
        kind=KIND, namespaced=True, verbs=_VERBS, subresources={"status"}, shortnames={"smem"}
    )
    kmock.resources[LEASES] = km.ResourceInfo(kind="Lease", namespaced=True, verbs=_VERBS)


@contextlib.asynccontextmanager
async def serve_get(
    path: str, handler: Callable[[web.Request], Awaitable[web.Response]]
) -> AsyncIterator[str]:
    """An HTTP server on a free loopback port answering ``GET path`` with ``handler``; yields the URL."""
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        await runner.cleanup()


async def eventually(probe: Callable[[], Any], *, timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll ``probe`` (sync or async) until it returns something truthy; fail with the last value.

    A bounded wait for an end state, not a timing assertion: ``timeout`` only stops a broken test.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        last = probe()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")
        await asyncio.sleep(0.05)


def smem_body(
    name: str,
    *,
    session_id: str = "sesn_011abc",
    secret: str = "work-secret",  # noqa: S107 - a Secret name
    **spec: Any,
) -> dict[str, Any]:
    base: dict[str, Any] = {
        "sessionId": session_id,
        "workItemSecretRef": {"name": secret, "key": "secret"},
        "apiBaseUrl": "http://memsync-store.memsync-system.svc:8080",
        "stores": [
            {"memoryStoreId": "memstore_01aa", "name": "User Preferences", "access": "read_write"},
            {"memoryStoreId": "memstore_02bb", "name": "Team Notes", "access": "read_only"},
        ],
        "sync": {"intervalSeconds": 15, "deletions": "enabled", "finalFlushSeconds": 30},
        "template": sandbox_template({"image": "example.com/agent-sandbox:1.0", "args": ["--task", "demo"]}),
    }
    base.update(spec)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": base,
    }


@dataclass
class Cluster:
    """The emulated API server, seen as a test (and a kubelet) would use it."""

    kmock: km.KubernetesEmulator
    namespace: str = NAMESPACE

    @property
    def url(self) -> str:
        return str(self.kmock.url).rstrip("/")

    def write_kubeconfig(self, path: Path, namespace: str | None = None) -> Path:
        """A kubeconfig for this emulator (a token it accepts; ``namespace``: the context's namespace)."""
        context: dict[str, Any] = {"cluster": "emulated", "user": "tester"}
        if namespace:
            context["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulated", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "test-token"}}],
            "contexts": [{"name": "emulated", "context": context}],
            "current-context": "emulated",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def _smem_path(self, name: str = "") -> str:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}"
        return f"{base}/{name}" if name else base

    def _pod_path(self, name: str = "") -> str:
        base = f"/api/v1/namespaces/{self.namespace}/pods"
        return f"{base}/{name}" if name else base

    async def request_json(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None
    ) -> Any:
        headers = {"User-Agent": self.user_agent}
        if content_type:
            headers["Content-Type"] = content_type
        async with self.kmock.request(method, path, json=body, headers=headers) as response:
            payload = await response.json(content_type=None)
            if response.status >= 400:
                raise AssertionError(f"{method} {path} -> {response.status}: {payload}")
            return payload

    # --- objects ---------------------------------------------------------------------------------------

    async def create_smem(self, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.request_json("POST", self._smem_path(), body)
        return result

    async def create_secret(self, name: str, data: dict[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": self.namespace}}
        body["data"] = data
        await self.request_json("POST", f"/api/v1/namespaces/{self.namespace}/secrets", body)

    async def patch_smem_spec(self, name: str, spec: dict[str, Any]) -> None:
        await self.request_json(
            "PATCH", self._smem_path(name), {"spec": spec}, content_type="application/merge-patch+json"
        )

    async def delete_smem(self, name: str) -> None:
        await self.request_json("DELETE", self._smem_path(name))

    def smem(self, name: str) -> dict[str, Any] | None:
        key = (SMEM_RES, self.namespace, name)
        if key not in self.kmock.objects or self.kmock.objects[key].deleted:
            return None
        return copy.deepcopy(self.kmock.objects[key].raw)

    def last_smem(self, name: str) -> dict[str, Any]:
        """The last stored state of a SessionMemory, also after the API removed it."""
        return copy.deepcopy(dict(self.kmock.objects[(SMEM_RES, self.namespace, name)].last.raw))

    def smem_status(self, name: str) -> dict[str, Any]:
        return (self.smem(name) or {}).get("status") or {}

    #: The ``User-Agent`` of the test's own requests (``request_json``).
    user_agent = "memsync-tests"

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The leader election's Lease as the emulator holds it."""
        key = (LEASE_RES, namespace, name)
        if key not in self.kmock.objects or self.kmock.objects[key].deleted:
            return None
        return copy.deepcopy(self.kmock.objects[key].raw)

    def pod(self, name: str) -> dict[str, Any] | None:
        key = (POD_RES, self.namespace, name)
        if key not in self.kmock.objects or self.kmock.objects[key].deleted:
            return None
        return copy.deepcopy(self.kmock.objects[key].raw)

    def pods(self) -> list[dict[str, Any]]:
        out = []
        for (resource, namespace, _name), obj in self.kmock.objects.items():
            if resource == POD_RES and namespace == self.namespace and not obj.deleted:
                out.append(copy.deepcopy(obj.raw))
        return out

    def pod_ever_created(self, name: str) -> int:
        """How many distinct Pods of that name were ever created (uids across the object's history)."""
        key = (POD_RES, self.namespace, name)
        if key not in self.kmock.objects:
            return 0
        uids = set()
        for version in self.kmock.objects[key].history:
            if version is not None and (version.get("metadata") or {}).get("uid"):
                uids.add(version["metadata"]["uid"])
        return len(uids)

    def events(self, involved: str | None = None) -> list[dict[str, Any]]:
        out = []
        for (resource, _ns, _name), obj in self.kmock.objects.items():
            if resource != EVENT_RES or obj.deleted:
                continue
            raw = obj.raw
            if involved is None or (raw.get("involvedObject") or {}).get("name") == involved:
                out.append(copy.deepcopy(raw))
        return out

    def event_reasons(self, involved: str) -> list[str]:
        return [str(e.get("reason")) for e in self.events(involved)]

    # --- the kubelet's part ----------------------------------------------------------------------------

    async def set_pod_status(self, name: str, status: dict[str, Any]) -> None:
        await self.request_json(
            "PATCH",
            self._pod_path(name) + "/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )

    async def put_node(
        self, name: str, ready: str, *, since: str, taints: list[dict[str, Any]] | None = None
    ) -> None:
        """Create Node ``name`` whose Ready condition is ``ready`` (True, False, Unknown) since ``since``."""
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "spec": {"taints": taints or []},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": ready,
                        "reason": "NodeStatusUnknown",
                        "lastTransitionTime": since,
                    }
                ]
            },
        }
        await self.request_json("POST", "/api/v1/nodes", body)

    async def bind_pod(self, name: str, node: str) -> None:
        """The scheduler's part: the Pod is bound to ``node``."""
        await self.request_json(
            "PATCH",
            self._pod_path(name),
            {"spec": {"nodeName": node}},
            content_type="application/merge-patch+json",
        )

    async def force_delete_pod(self, name: str) -> None:
        """What the Pod garbage collector does to a Pod whose node is deleted: a deletion with no grace,
        carried out at once."""
        await self.request_json("DELETE", self._pod_path(name), {"gracePeriodSeconds": 0})
        await self.remove_pod(name)

    async def remove_pod(self, name: str) -> None:
        """The kubelet confirms the Pod ended: drop the test finalizer so the API removes the object."""
        await self.request_json(
            "PATCH",
            self._pod_path(name),
            {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )


FAST = ControllerConfig(
    agent_image=AGENT_IMAGE,
    recheck_interval=0.5,
    delete_recheck_delay=0.2,
    delete_extra_seconds=60.0,
    report_settle_seconds=1.0,
)


def fast_settings(server_timeout: int = 60) -> kopf.OperatorSettings:
    settings = configure_settings(
        kopf.OperatorSettings(),
        timeouts=WatchTimeouts(
            server_timeout=server_timeout,
            client_timeout=server_timeout + 10,
            connect_timeout=5,
            reconnect_backoff=0.1,
        ),
    )
    settings.networking.error_backoffs = [0.1, 0.2, 0.5]
    settings.posting.default_backoffs = [0.1, 0.2]
    settings.queueing.exit_timeout = 1.0
    settings.persistence.consistency_timeout = 1.0
    settings.execution.default_backoff = 0.5
    return settings


@dataclass
class RunningOperator:
    thread: threading.Thread
    stop_flag: threading.Event
    kube: KubeApi
    errors: list[BaseException] = field(default_factory=list)


@contextlib.asynccontextmanager
async def run_operator(
    cluster: Cluster,
    config: ControllerConfig = FAST,
    *,
    clusterwide: bool = False,
    fence: Fence | None = None,
    settings: kopf.OperatorSettings | None = None,
    namespaces: tuple[str, ...] | None = None,
    **process_options: Any,
) -> AsyncIterator[RunningOperator]:
    """The operator process (``controller/runtime.py``) in a thread with its own event loop (as
    ``kopf.testing.KopfRunner`` does), pointed at the emulator, which keeps serving from the test's loop.
    Stopped, and checked for a crash, on exit.

    ``clusterwide``: serve every namespace (as the manifests deploy it), else only the test's namespace (or
    ``namespaces``);
    ``process_options``: more of ``runtime.Process`` (an election, a liveness URL).
    """
    kube = KubeApi.for_host(cluster.url)
    process = Process(
        settings=settings or fast_settings(),
        namespaces=namespaces if namespaces is not None else () if clusterwide else (cluster.namespace,),
        **process_options,
    )
    stop_flag = threading.Event()
    ready_flag = threading.Event()
    errors: list[BaseException] = []

    def main() -> None:
        try:
            # as ``memsync operator`` runs it, with leader election only when a test asks for it
            asyncio.run(
                runtime.run(
                    kube,
                    config,
                    process,
                    fence=fence or Fence(elected=False),
                    stop=stop_flag,
                    ready=ready_flag,
                )
            )
        except BaseException as exc:  # reported to the test below
            errors.append(exc)

    thread = threading.Thread(target=main, name="kopf-operator", daemon=True)
    thread.start()
    running = RunningOperator(thread=thread, stop_flag=stop_flag, kube=kube, errors=errors)
    try:
        started = await asyncio.to_thread(ready_flag.wait, 10)
        assert started, f"the operator did not start: {errors!r}"
        yield running
    finally:
        stop_flag.set()
        await asyncio.to_thread(thread.join, 20)
        kube.close()
    assert not thread.is_alive(), "the operator did not stop"
    assert not errors, f"the operator crashed: {errors!r}"


# --------------------------------------------------------------------------------------------------
# The kubelet's side: container statuses as the kubelet reports them
# --------------------------------------------------------------------------------------------------


def waiting(name: str, reason: str = "PodInitializing", *, message: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return {"name": name, "ready": False, "restartCount": 0, "started": False, "state": {"waiting": state}}


def running(name: str, *, ready: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "ready": ready,
        "restartCount": 0,
        "started": True,
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
    }


def terminated(
    name: str, exit_code: int, message: str | None = None, *, finished: str = "2026-01-01T00:10:00Z"
) -> dict[str, Any]:
    state: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": "2026-01-01T00:00:00Z",
        "finishedAt": finished,
    }
    if message is not None:
        state["message"] = message
    return {"name": name, "ready": False, "restartCount": 0, "started": False, "state": {"terminated": state}}


def pod_status(phase: str, init: list[dict[str, Any]], containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"phase": phase, "initContainerStatuses": init, "containerStatuses": containers}


# --------------------------------------------------------------------------------------------------
# The sync agent's side: termination messages of the two stores of ``smem_body``
# --------------------------------------------------------------------------------------------------

MOUNTED = json.dumps(
    {"phase": "mounted", "stores": {"memstore_01aa": {"memories": 12}, "memstore_02bb": {"memories": 3}}}
)


def flushed(complete: bool = True, **per_store: dict[str, int | list[str]]) -> str:
    """A final flush report; by default a complete one: 4 uploads and 1 delete in memstore_01aa."""
    stores = per_store or {
        "memstore_01aa": {"uploaded": 4, "deleted": 1, "conflicts": 0, "refused": 0, "unsent": 0},
        "memstore_02bb": {"uploaded": 0, "deleted": 0, "conflicts": 0, "refused": 0, "unsent": 0},
    }
    return json.dumps({"phase": "flushed", "complete": complete, "stores": stores})


#: ``status.stores[0]`` after ``MOUNTED`` and the default ``flushed()``.
FIRST_STORE_RESULT = {
    "memoryStoreId": "memstore_01aa",
    "mountPath": "/mnt/memory/user-preferences",
    "memoriesMounted": 12,
    "uploaded": 4,
    "deleted": 1,
    "conflicts": 0,
    "refused": 0,
    "unsent": 0,
}

#: memsync-mount done, the sidecar ready, the sandbox running.
RUNNING_POD = pod_status(
    "Running",
    [terminated("memsync-mount", 0, MOUNTED), running("memsync-sync", ready=True)],
    [running("sandbox", ready=True)],
)
