"""The controller's few calls to the Kubernetes API, through the official ``kubernetes`` client.

The client is synchronous; every call runs in a worker thread of the client's own pool (``CALL_THREADS``
threads, as many pooled connections) so kopf's event loop never blocks and calls to a slow API server
overlap. 16 threads: with 8, a burst of 1,000 new SessionMemories queued for them (about 14 handled a
second while the API server answered in 70 ms); with 16 the operator kept pace with the clients creating them.
Objects go in and come out as plain camelCase dicts (the wire format), the same shape kopf hands to
handlers, so the pure functions of ``status.py`` and ``pod.py`` see one representation.

``KubeApi`` is the seam: ``from_environment()`` uses the same credentials kopf does (in-cluster service
account, else the kubeconfig), and ``for_host(url)`` points it at any API server, e.g. an emulator in
tests. Secrets are only ever inspected for the presence of a key: their values are dropped as soon as the
response is parsed and never logged.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import quote

import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

from memsync.crd.models import GROUP, PLURAL, VERSION

if TYPE_CHECKING:
    import kopf  # imported when used: ``memsync status`` uses this client without the operator

T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT = 30.0
CALL_THREADS: Final = 16


class KubeApiError(Exception):
    """A Kubernetes API call failed. ``str()`` is the API's own short message (never a request body)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


#: API statuses that are not a verdict on the request: the same call can succeed later without anyone
#: changing it. 401 (a rotated token; kopf logs in again), 404 (on a create: the namespace is going away
#: with the SessionMemory), 408, 409 (a conflict of concurrent writers), 429 (API Priority and Fairness
#: throttling) and every 5xx. Every other 4xx is a refusal the user must act on.
TRANSIENT_STATUSES: Final = frozenset({401, 404, 408, 409, 429})

#: The 403 the ServiceAccount admission plugin answers for a Pod created in a namespace whose ``default``
#: ServiceAccount does not exist yet: the namespace was just created and the serviceaccount controller
#: creates it within moments, so this 403 is transient, unlike every other 403.
_MISSING_SERVICE_ACCOUNT = re.compile(r"error looking up service account|serviceaccount \S+ not found")

#: ``Invalid value: <v>`` (and Duplicate/Unsupported): field errors echo the value they refuse, which for
#: the sandbox's environment may be a literal the user did not mean to publish.
_ECHOED_VALUE = re.compile(
    r'((?:Invalid|Duplicate|Unsupported|Forbidden) value: )("(?:[^"\\]|\\.)*(?:"|$)|[^:,;\s]+)'
)


def is_refusal(exc: KubeApiError) -> bool:
    """True when the API refused the request itself (repeating it unchanged cannot help)."""
    if exc.status >= 500 or exc.status < 400 or exc.status in TRANSIENT_STATUSES:
        return False
    return not is_missing_service_account(exc)


def is_missing_service_account(exc: KubeApiError) -> bool:
    """True for the ServiceAccount admission plugin's 403: the Pod's ServiceAccount does not exist (yet)."""
    return exc.status == 403 and _MISSING_SERVICE_ACCOUNT.search(exc.message) is not None


#: What the ResourceQuota and LimitRanger admission plugins answer (403) when a Pod does not fit: a quota
#: exceeded or one that needs a request or limit the Pod does not set, a LimitRange's minimum, maximum or
#: limit-to-request ratio. Waiting may help (a quota frees up, the LimitRange or the template changes).
_QUOTA_OR_LIMITS = re.compile(
    r"exceeded quota|failed quota|(minimum|maximum) \S+ usage per (Container|Pod)|limit to request ratio per"
)


def is_quota_refusal(exc: KubeApiError) -> bool:
    """True for a Pod refused by a ResourceQuota or a LimitRange (a wait, not a verdict on the session)."""
    return exc.status == 403 and _QUOTA_OR_LIMITS.search(exc.message) is not None


def refusal_message(exc: KubeApiError) -> str:
    """The API's own message for a status or an Event, with any echoed field value hidden."""
    return _ECHOED_VALUE.sub(r"\1(value hidden)", f"{exc.status} {exc.reason}: {exc.message}")


#: The oldest Kubernetes minor release the operator runs against. Native sidecars (init containers with
#: ``restartPolicy: Always``, and their probes) are on by default since 1.29, but up to 1.32 and in early
#: 1.33/1.34 patches the kubelet has a defect: with the Pod's ``restartPolicy: Never`` (memsync's), a sidecar
#: that fails before its startupProbe first passes and then restarts fine is never probed again, so the Pod
#: stays Initializing forever and the agent never runs. It was fixed in 1.35 and in the patches below.
MIN_KUBERNETES: Final = (1, 33)
#: The first patch of each supported minor release with that kubelet fix (later minors have it from .0).
FIRST_FIXED_PATCH: Final = {(1, 33): 6, (1, 34): 2}


def parse_server_version(info: Mapping[str, Any]) -> tuple[int, int] | None:
    """(major, minor) from the API server's ``/version`` answer; None when it cannot be read.

    Providers decorate the minor (``"29+"``) or only the gitVersion (``v1.29.3-eks-...``) is usable.
    """
    major, minor = (
        re.match(r"\d+", str(info.get("major") or "")),
        re.match(r"\d+", str(info.get("minor") or "")),
    )
    if major and minor:
        return int(major.group()), int(minor.group())
    found = re.match(r"v?(\d+)\.(\d+)", str(info.get("gitVersion") or ""))
    return (int(found.group(1)), int(found.group(2))) if found else None


def parse_patch(info: Mapping[str, Any]) -> int | None:
    """The patch number of the gitVersion (``v1.33.6-eks-...`` -> 6); None when it cannot be read."""
    found = re.match(r"v?\d+\.\d+\.(\d+)", str(info.get("gitVersion") or ""))
    return int(found.group(1)) if found else None


def version_refusal(info: Mapping[str, Any]) -> str | None:
    """Why the operator must not run against this API server (too old, or a patch with the kubelet's
    sidecar startup defect), or None. A version it cannot read is not refused (the start logs a warning)."""
    version = parse_server_version(info)
    if version is None:
        return None
    have = info.get("gitVersion") or ".".join(map(str, version))
    want = ".".join(map(str, MIN_KUBERNETES))
    if version < MIN_KUBERNETES:
        return (
            f"the Kubernetes API server is {have}; memsync needs {want} or newer (native sidecar containers, "
            "and a kubelet whose sidecar startup probes cannot leave a session Initializing forever): "
            "upgrade the cluster"
        )
    first_fixed = FIRST_FIXED_PATCH.get(version)
    patch = parse_patch(info)
    if first_fixed is not None and patch is not None and patch < first_fixed:
        minor = f"{version[0]}.{version[1]}"
        return (
            f"the Kubernetes API server is {have}; on {minor} memsync needs {minor}.{first_fixed} or newer "
            "(earlier kubelets can leave a Pod Initializing forever when a native sidecar restarts before "
            "its startupProbe passes): upgrade the cluster"
        )
    return None


def version_unknown(info: Mapping[str, Any]) -> bool:
    """True when ``version_refusal`` could not tell (no version, or no patch where the patch matters)."""
    version = parse_server_version(info)
    return version is None or (version in FIRST_FIXED_PATCH and parse_patch(info) is None)


class KubeNotFound(KubeApiError):
    pass


class KubeAlreadyExists(KubeApiError):
    pass


class KubeConflict(KubeApiError):
    """409 other than AlreadyExists: a resourceVersion precondition failed."""


def _error(exc: ApiException) -> KubeApiError:
    status = int(exc.status or 0)
    reason = str(exc.reason or "")
    message = reason
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    if isinstance(body, dict):
        reason = str(body.get("reason") or reason)
        message = str(body.get("message") or message)
    message = message[:500]
    if status == 404:
        return KubeNotFound(status, reason, message)
    if status == 409 and reason == "AlreadyExists":
        return KubeAlreadyExists(status, reason, message)
    if status == 409:
        return KubeConflict(status, reason, message)
    return KubeApiError(status, reason, message)


def core_path(namespace: str, plural: str, name: str | None = None) -> str:
    """The path of core/v1 ``plural`` in ``namespace`` (of one object when ``name`` is given)."""
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/{plural}"
    return f"{path}/{quote(name, safe='')}" if name is not None else path


def custom_path(version: str, plural: str, namespace: str | None, name: str | None = None) -> str:
    """The path of this group's ``plural`` at ``version`` (of every namespace when ``namespace`` is None; of
    one object by ``name``)."""
    scope = f"/namespaces/{quote(namespace, safe='')}" if namespace is not None else ""
    path = f"/apis/{GROUP}/{version}{scope}/{plural}"
    return f"{path}/{quote(name, safe='')}" if name is not None else path


_core = core_path


def _lease(namespace: str, name: str | None = None) -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
    return f"{path}/{quote(name, safe='')}" if name else path


def _session_memories(namespace: str | None, name: str | None = None) -> str:
    return custom_path(VERSION, PLURAL, namespace, name)


def _decode(response: Any) -> dict[str, Any]:
    data = response.data if hasattr(response, "data") else response
    if isinstance(data, bytes | bytearray):
        data = data.decode("utf-8")
    value = json.loads(data) if isinstance(data, str) and data else {}
    return value if isinstance(value, dict) else {}


def _items(listing: Mapping[str, Any]) -> list[dict[str, Any]]:
    items = listing.get("items")
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


class KubeApi:
    """Pods, Secrets (keys only), SessionMemories and the leader election's Lease, as plain dicts.

    ``fence``, when set, is asked before every write (``controller/leadership/fence.py``): a replica that
    may no longer be the leader never sends one. The elector's own Lease calls are the exception."""

    def __init__(self, configuration: kubernetes.client.Configuration) -> None:
        configuration.connection_pool_maxsize = CALL_THREADS
        self._executor = ThreadPoolExecutor(max_workers=CALL_THREADS, thread_name_prefix="kube-api")
        self._client = kubernetes.client.ApiClient(configuration)
        self.fence: Callable[[str, str], None] | None = None

    @property
    def user_agent(self) -> str:
        return str(self._client.user_agent)

    @user_agent.setter
    def user_agent(self, value: str) -> None:
        """The ``User-Agent`` of every request (the operator names its replica there: an audit log shows which
        replica made each request)."""
        self._client.user_agent = value

    @classmethod
    def from_environment(cls, *, context: str | None = None) -> KubeApi:
        """In-cluster service account when running in a Pod, else the kubeconfig (``KUBECONFIG``)."""
        configuration = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(context=context, client_configuration=configuration)  # type: ignore[no-untyped-call]
        return cls(configuration)

    @classmethod
    def for_host(cls, host: str, *, token: str | None = None, verify_ssl: bool = True) -> KubeApi:
        """An API server at ``host`` (e.g. ``http://127.0.0.1:PORT``), optionally with a bearer token."""
        configuration = kubernetes.client.Configuration()
        configuration.host = host.rstrip("/")
        configuration.verify_ssl = verify_ssl
        if token:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return cls(configuration)

    def connection_info(self) -> kopf.ConnectionInfo:
        """These same credentials for kopf: its login handler calls this (again after any 401).

        Reading the token through the configuration runs the client's refresh hook, so a rotated
        service-account token (or an exec plugin's new token) reaches kopf too.
        """
        import kopf  # noqa: PLC0415 (see the TYPE_CHECKING import)

        c = self._client.configuration
        header = c.get_api_key_with_prefix("BearerToken") or c.get_api_key_with_prefix("authorization")
        scheme: str | None = None
        token: str | None = None
        if header:
            parts = str(header).split(" ", 1)
            scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
        return kopf.ConnectionInfo(
            server=str(c.host),
            ca_path=c.ssl_ca_cert,
            insecure=not c.verify_ssl,
            username=c.username or None,
            password=c.password or None,
            scheme=scheme,
            token=token,
            certificate_path=c.cert_file,
            private_key_path=c.key_file,
        )

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        fenced: bool = True,
    ) -> dict[str, Any]:
        """One request through the client's ApiClient (its credentials, TLS, pool and token refresh).

        The generated API classes are not used: importing ``CoreV1Api`` alone costs the process about
        20 MB for the six calls made here."""
        if fenced and self.fence is not None:
            self.fence(method, path)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self._client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )

        def run() -> dict[str, Any]:
            try:
                response = self._client.call_api(*request, _request_timeout=REQUEST_TIMEOUT)
                response.read()  # type: ignore[no-untyped-call]
                if not 200 <= response.status <= 299:
                    raise ApiException.from_response(http_resp=response, body=None, data=None)
            except ApiException as exc:
                raise _error(exc) from None
            return _decode(response)

        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    async def server_version(self) -> dict[str, Any]:
        """The API server's ``/version`` answer (major, minor, gitVersion, ...)."""
        return await self._call("GET", "/version/")

    async def served_plurals(self, group: str, version: str) -> frozenset[str] | None:
        """The resources discovery lists at ``/apis/<group>/<version>`` (subresources left out); None when
        the API server does not serve that group/version (404)."""
        try:
            listing = await self._call("GET", f"/apis/{quote(group, safe='')}/{quote(version, safe='')}")
        except KubeNotFound:
            return None
        resources = listing.get("resources")
        names = (
            str(r.get("name"))
            for r in (resources if isinstance(resources, list) else [])
            if isinstance(r, dict) and "/" not in str(r.get("name"))
        )
        return frozenset(names)

    # --- Pods --------------------------------------------------------------------------------------------

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call("GET", _core(namespace, "pods", name))
        except KubeNotFound:
            return None

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a Pod; raises :class:`KubeAlreadyExists` when one of that name exists.

        A create can only conflict on the name, so any 409 is reported as :class:`KubeAlreadyExists`.
        """
        try:
            return await self._call("POST", _core(namespace, "pods"), body=body)
        except KubeConflict as exc:
            raise KubeAlreadyExists(exc.status, "AlreadyExists", exc.message) from None

    async def delete_pod(
        self, namespace: str, name: str, *, uid: str | None = None, grace_period_seconds: int | None = None
    ) -> bool:
        """Delete a Pod (the Pod's own grace period unless given); False when it was already gone.

        ``uid`` makes the deletion conditional: a different Pod that took the name is left alone.
        """
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        try:
            await self._call("DELETE", _core(namespace, "pods", name), body=options)
        except KubeNotFound:
            return False
        return True

    async def get_node(self, name: str) -> dict[str, Any] | None:
        """A Node (cluster-scoped), or None when it does not exist."""
        try:
            return await self._call("GET", f"/api/v1/nodes/{quote(name, safe='')}")
        except KubeNotFound:
            return None

    # --- Secrets (keys only) -----------------------------------------------------------------------------

    async def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None:
        """The keys a Secret holds, or None when it does not exist. Values are discarded unread."""
        try:
            secret = await self._call("GET", _core(namespace, "secrets", name))
        except KubeNotFound:
            return None
        keys: set[str] = set()
        for field in ("data", "stringData"):
            section = secret.get(field)
            if isinstance(section, dict):
                keys.update(str(k) for k in section)
        secret.clear()
        return frozenset(keys)

    # --- SessionMemories ---------------------------------------------------------------------------------

    async def get_session_memory(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call("GET", _session_memories(namespace, name))
        except KubeNotFound:
            return None

    async def list_session_memories(self, namespace: str) -> list[dict[str, Any]]:
        listing = await self._call("GET", _session_memories(namespace))
        return _items(listing)

    async def list_all_session_memories(self) -> list[dict[str, Any]]:
        """Every SessionMemory of every namespace (needs cluster-wide list permission)."""
        listing = await self._call("GET", _session_memories(None))
        return _items(listing)

    async def list_events(self, namespace: str, *, involved_name: str | None = None) -> list[dict[str, Any]]:
        """The core/v1 Events of a namespace, only those about objects named ``involved_name`` if given."""
        selector = {"fieldSelector": f"involvedObject.name={involved_name}"} if involved_name else {}
        return _items(await self._call("GET", _core(namespace, "events"), query=selector))

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        """Create one core/v1 Event."""
        await self._call("POST", _core(namespace, "events"), body=event)

    # --- the leader election's Lease (never fenced: renewing it is what keeps the fence open) -------------

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call("GET", _lease(namespace, name), fenced=False)
        except KubeNotFound:
            return None

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create the Lease; :class:`KubeConflict` when another replica created it first."""
        return await self._call("POST", _lease(namespace), body=body, fenced=False)

    async def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the Lease; ``body`` carries the resourceVersion read, so a concurrent write of another
        replica makes this one fail with :class:`KubeConflict`."""
        return await self._call("PUT", _lease(namespace, name), body=body, fenced=False)

    async def patch_session_memory_status(
        self, namespace: str, name: str, status: Mapping[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]:
        """JSON-merge-patch ``status`` through the status subresource.

        With ``resource_version``, the API server refuses the patch (:class:`KubeConflict`) if the object
        changed since it was read, so a read-modify-write never overwrites a newer status.
        """
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self._call(
            "PATCH", _session_memories(namespace, name) + "/status", body=body, content_type=MERGE_PATCH
        )
