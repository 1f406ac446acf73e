"""``memsync status`` (also ``kubectl memsync status``): the SessionMemories of a namespace, or one in detail.

The formatting is ``memsync.status.view`` and the fetching ``memsync.status.cluster``; both are imported
only when the command runs, so ``memsync status --help`` loads neither the Kubernetes client nor pydantic.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import click


@click.command("status")
@click.argument("name", required=False)
@click.option("-n", "--namespace", default=None, help="Namespace (default: the kubeconfig context's).")
@click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace (not with NAME or --namespace).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    default=None,
    help="kubeconfig file (default: KUBECONFIG, else ~/.kube/config; in a Pod, its service account).",
)
@click.option("--context", default=None, help="kubeconfig context (default: the current one).")
def status(
    *,
    name: str | None,
    namespace: str | None,
    all_namespaces: bool,
    as_json: bool,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Show the SessionMemories of a namespace: phase, each store's health, last sync and conflicts.

    With NAME, one SessionMemory in detail: its stores, conditions, sandbox Pod and recent Events.
    """
    if all_namespaces and (name is not None or namespace is not None):
        raise click.UsageError("--all-namespaces excludes NAME and --namespace")
    from memsync.status import render, view  # noqa: PLC0415 (imported when the command runs, not for --help)
    from memsync.status.cluster import connect, fetch_list, fetch_one  # noqa: PLC0415

    conn = connect(kubeconfig, context)
    ns = namespace or conn.namespace
    now = datetime.now(UTC)
    try:
        if name is not None:
            obj, pod, events = asyncio.run(fetch_one(conn, ns, name))
            result = view.detail(obj, pod, events)
            click.echo(
                json.dumps(render.as_json(result), indent=2)
                if as_json
                else render.render_detail(result, now=now)
            )
            return
        objects = asyncio.run(fetch_list(conn, None if all_namespaces else ns))
    finally:
        conn.api.close()
    summaries = view.sort_summaries(view.summarize(o) for o in objects)
    if as_json:
        click.echo(json.dumps(render.as_json(summaries), indent=2))
    elif not summaries:
        where = "in any namespace" if all_namespaces else f"in namespace {ns}"
        click.echo(f"No SessionMemories {where}.", err=True)
    else:
        click.echo(render.render_list(summaries, now=now, all_namespaces=all_namespaces))
