"""``memsync status``'s side of the cluster: connect as kubectl does, and fetch SessionMemories, their Pods
and Events. The command (``memsync.cli.status``) imports this only when it runs, not for its help.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import click
import kubernetes.client
import kubernetes.config

from memsync.controller.kube import KubeApi, KubeApiError
from memsync.crd.models import GROUP, PLURAL
from memsync.status import view

#: Where a Pod's service account namespace is mounted (the default namespace inside a cluster).
IN_CLUSTER_NAMESPACE_FILE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def connect(kubeconfig: str | None, context: str | None) -> tuple[KubeApi, str]:
    """The API client and the default namespace: the kubeconfig's (``--kubeconfig``, ``KUBECONFIG``,
    ``~/.kube/config``) current or given context; inside a Pod without a kubeconfig, its service account."""
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
        _, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        if context is not None:
            contexts, _ = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
            active = next((c for c in contexts if c.get("name") == context), active)
        namespace = str((active or {}).get("context", {}).get("namespace") or "default")
    except (kubernetes.config.ConfigException, OSError) as exc:
        if kubeconfig is not None or context is not None:
            raise click.UsageError(f"cannot use the kubeconfig: {exc}") from None
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except kubernetes.config.ConfigException:
            raise click.UsageError(
                "no Kubernetes configuration: no kubeconfig (--kubeconfig, KUBECONFIG or ~/.kube/config) "
                "and not running in a Pod"
            ) from None
        try:
            namespace = IN_CLUSTER_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or "default"
        except OSError:
            namespace = "default"
    return KubeApi(configuration), namespace


def _api_failure(exc: KubeApiError, what: str) -> click.ClickException:
    if exc.status == 404 and "the server could not find the requested resource" in exc.message:
        return click.ClickException(
            f"{what}: the SessionMemory resource ({PLURAL}.{GROUP}) is not installed in this cluster"
        )
    if exc.status in (401, 403):
        return click.ClickException(f"{what}: the API server refused: {exc}")
    return click.ClickException(f"{what}: {exc}")


async def fetch_list(api: KubeApi, namespace: str | None) -> list[dict[str, Any]]:
    try:
        if namespace is None:
            return await api.list_all_session_memories()
        return await api.list_session_memories(namespace)
    except KubeApiError as exc:
        where = f"in namespace {namespace}" if namespace else "in all namespaces"
        raise _api_failure(exc, f"cannot list SessionMemories {where}") from None


async def fetch_one(
    api: KubeApi, namespace: str, name: str
) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    """The SessionMemory, its Pod (None when there is none) and the Events about either."""
    try:
        obj = await api.get_session_memory(namespace, name)
    except KubeApiError as exc:
        raise _api_failure(exc, f"cannot read SessionMemory {namespace}/{name}") from None
    if obj is None:
        raise click.ClickException(f"SessionMemory {name!r} not found in namespace {namespace}")
    pod_name = view.summarize(obj).pod_name
    pod: dict[str, Any] | None = None
    events: list[dict[str, Any]] = []
    try:
        if pod_name:
            pod = await api.get_pod(namespace, pod_name)
        for involved in dict.fromkeys(n for n in (name, pod_name) if n):
            events += await api.list_events(namespace, involved_name=involved)
    except KubeApiError as exc:
        # The SessionMemory itself was readable: show it, and say what could not be read.
        click.echo(f"warning: {_api_failure(exc, 'cannot read its Pod or Events').message}", err=True)
    return obj, pod, events
