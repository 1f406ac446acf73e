"""``memsync status`` (also ``kubectl memsync status``): the SessionMemories of a namespace, or one in detail.

The formatting is ``memsync.status.view`` and the fetching ``memsync.cli.status_cluster``; both are imported
only when the command runs, so ``memsync status --help`` loads neither the Kubernetes client nor pydantic.
``--watch`` fetches again every ``--interval`` seconds and prints the view again whenever what it shows
changed (not when only an age moved on); Ctrl-C ends it with exit code 0.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click

from memsync.cli.output import dump, is_data, output_options


@dataclass(frozen=True)
class Query:
    name: str | None
    namespace: str | None  # None: every namespace
    output: str


def _fetch(conn: Any, query: Query) -> tuple[Any, str, str]:
    """What to show: (its data, comparable across fetches; the text to print; what to say on stderr)."""
    from memsync.cli.status_cluster import fetch_list, fetch_one  # noqa: PLC0415
    from memsync.status import render, view  # noqa: PLC0415 (imported when the command runs, not --help)

    now = datetime.now(UTC)
    if query.name is not None:
        obj, pod, events = asyncio.run(fetch_one(conn, query.namespace or conn.namespace, query.name))
        result = view.detail(obj, pod, events)
        data = render.as_json(result)
        return (
            data,
            dump(data, query.output) if is_data(query.output) else render.render_detail(result, now=now),
            "",
        )
    objects = asyncio.run(fetch_list(conn, query.namespace))
    summaries = view.sort_summaries(view.summarize(o) for o in objects)
    data = render.as_json(summaries)
    if is_data(query.output):
        return data, dump(data, query.output), ""
    if not summaries:
        where = "in any namespace" if query.namespace is None else f"in namespace {query.namespace}"
        return data, "", f"No SessionMemories {where}."
    text = render.render_list(
        summaries, now=now, all_namespaces=query.namespace is None, wide=query.output == "wide"
    )
    return data, text, ""


def _show(text: str, note: str) -> None:
    if text:
        click.echo(text)
    if note:
        click.echo(note, err=True)


@click.command("status")
@click.argument("name", required=False)
@click.option("-n", "--namespace", default=None, help="Namespace (default: the kubeconfig context's).")
@click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace (not with NAME or --namespace).")
@output_options
@click.option(
    "-w", "--watch", is_flag=True, help="Keep watching: print again whenever it changes (Ctrl-C ends)."
)
@click.option(
    "--interval",
    type=click.FloatRange(min=1.0),
    default=2.0,
    show_default=True,
    help="With --watch: seconds between fetches.",
)
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
    output: str,
    watch: bool,
    interval: float,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Show the SessionMemories of a namespace: phase, each store's health, last sync and conflicts.

    With NAME, one SessionMemory in detail: its stores, conditions, sandbox Pod and recent Events.
    """
    if all_namespaces and (name is not None or namespace is not None):
        raise click.UsageError("--all-namespaces excludes NAME and --namespace")
    from memsync.cli.status_cluster import connect  # noqa: PLC0415 (imported when the command runs)

    conn = connect(kubeconfig, context)
    query = Query(name, None if all_namespaces else (namespace or conn.namespace), output)
    try:
        data, text, note = _fetch(conn, query)
        _show(text, note)
        while watch:
            try:
                time.sleep(interval)
                again, text, note = _fetch(conn, query)
            except KeyboardInterrupt:
                return
            if again != data:
                data = again
                _show(text, note)
    finally:
        conn.api.close()
