"""``memsync status``'s side of the cluster: connect as kubectl does, and fetch SessionMemories, their Pods
and Events. The command (``memsync.cli.status``) imports this only when it runs, not for its help;
the formatting is ``memsync.status.view``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import click
import kubernetes.client
import kubernetes.config
from urllib3.exceptions import HTTPError

from memsync.cli.failures import CliError, ExitCode, kube_exit_code
from memsync.controller.kube import KubeApi, KubeApiError
from memsync.crd.models import GROUP, PLURAL
from memsync.status import view

#: Where a Pod's service account namespace is mounted (the default namespace inside a cluster).
IN_CLUSTER_NAMESPACE_FILE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class Connection:
    api: KubeApi
    namespace: str  # the context's (or the Pod's) default namespace
    server: str  # the API server's URL, for messages


def _kubeconfig_files(kubeconfig: str | None) -> list[Path]:
    """The files kubectl would read: ``--kubeconfig``, else each of ``KUBECONFIG``, else ~/.kube/config."""
    if kubeconfig is not None:
        return [Path(kubeconfig)]
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in listed] or [Path("~/.kube/config").expanduser()]


def _why(exc: Exception) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    if isinstance(exc, kubernetes.config.ConfigException | OSError):
        return first or type(exc).__name__
    return f"not a valid kubeconfig ({type(exc).__name__}: {first})"


def connect(kubeconfig: str | None, context: str | None) -> Connection:
    """The API client and the default namespace: the kubeconfig's (``--kubeconfig``, ``KUBECONFIG``,
    ``~/.kube/config``) current or given context; inside a Pod without a kubeconfig, its service account.
    A kubeconfig that exists but cannot be used is an error naming it, never a fall back to the Pod's."""
    configuration = kubernetes.client.Configuration()
    files = _kubeconfig_files(kubeconfig)
    # Named explicitly: the client's own default is KUBECONFIG as it was when the client was imported.
    config_files = os.pathsep.join(str(f) for f in files)
    if kubeconfig is None and context is None and not any(f.exists() for f in files):
        namespace = _in_cluster(configuration)
    else:
        try:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=config_files, context=context, client_configuration=configuration
            )
            contexts, active = kubernetes.config.list_kube_config_contexts(config_file=config_files)  # type: ignore[no-untyped-call]
            if context is not None:
                active = next((c for c in contexts if c.get("name") == context), active)
            namespace = str((active or {}).get("context", {}).get("namespace") or "default")
        except Exception as exc:  # a malformed file fails deep in the loader with any type of error
            names = ", ".join(str(f) for f in files)
            raise CliError(f"cannot use the kubeconfig {names}: {_why(exc)}", ExitCode.USAGE) from exc
    configuration.retries = 0  # one attempt: an unreachable server is reported at once, DNS included
    return Connection(KubeApi(configuration), namespace, str(configuration.host))


def _in_cluster(configuration: kubernetes.client.Configuration) -> str:
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException as exc:
        raise CliError(
            "no Kubernetes configuration: no kubeconfig (--kubeconfig, KUBECONFIG or ~/.kube/config) "
            "and not running in a Pod",
            ExitCode.USAGE,
        ) from exc
    try:
        return IN_CLUSTER_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or "default"
    except OSError:
        return "default"


def _api_failure(exc: Exception, what: str, server: str) -> CliError:
    if not isinstance(exc, KubeApiError):
        reason = getattr(exc, "reason", None) or exc
        text = str(reason)
        why = text.split("): ", 1)[1] if "): " in text else text  # urllib3's "Conn(host=..): why"
        return CliError(
            f"{what}: cannot reach the Kubernetes API server at {server}: {why}", ExitCode.UNREACHABLE
        )
    code = kube_exit_code(exc.status)
    if exc.status == 404 and "the server could not find the requested resource" in exc.message:
        return CliError(
            f"{what}: the SessionMemory resource ({PLURAL}.{GROUP}) is not installed in this cluster", code
        )
    if exc.status in (401, 403):
        return CliError(f"{what}: the API server at {server} refused: {exc}", code)
    return CliError(f"{what}: {exc}", code)


async def fetch_list(conn: Connection, namespace: str | None) -> list[dict[str, Any]]:
    api = conn.api
    try:
        if namespace is None:
            return await api.list_all_session_memories()
        return await api.list_session_memories(namespace)
    except (KubeApiError, HTTPError) as exc:
        where = f"in namespace {namespace}" if namespace else "in all namespaces"
        raise _api_failure(exc, f"cannot list SessionMemories {where}", conn.server) from exc


async def fetch_one(
    conn: Connection, namespace: str, name: str
) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    """The SessionMemory, its Pod (None when there is none) and the Events about either."""
    api = conn.api
    try:
        obj = await api.get_session_memory(namespace, name)
    except (KubeApiError, HTTPError) as exc:
        raise _api_failure(exc, f"cannot read SessionMemory {namespace}/{name}", conn.server) from exc
    if obj is None:
        raise CliError(f"SessionMemory {name!r} not found in namespace {namespace}", ExitCode.NOT_FOUND)
    pod_name = view.summarize(obj).pod_name
    pod: dict[str, Any] | None = None
    events: list[dict[str, Any]] = []
    try:
        if pod_name:
            pod = await api.get_pod(namespace, pod_name)
        for involved in dict.fromkeys(n for n in (name, pod_name) if n):
            events += await api.list_events(namespace, involved_name=involved)
    except (KubeApiError, HTTPError) as exc:
        # The SessionMemory itself was readable: show it, and say what could not be read.
        failure = _api_failure(exc, "cannot read its Pod or Events", conn.server)
        click.echo(f"warning: {failure.message}", err=True)
    return obj, pod, events
