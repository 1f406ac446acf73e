"""``memsync store show|delete|archive|memories|history|redact``: look into a store and manage it over HTTP.

Each command talks to the server with the store client and the admin key (see ``memsync.cli.store``), has
``--json`` for scripts (one object, or one object per line for listings, as ``store list``), and names the
argument a refusal is about. Memory content is never printed: listings use the API's ``basic`` view. The
destructive commands (``delete``, ``redact``) ask first, or need ``--yes`` when stdin is not a terminal.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import click
from pydantic import BaseModel

from memsync.api.models import Memory, MemoryStore, MemoryVersion
from memsync.cli.failures import CliError, ExitCode, store_exit_code
from memsync.cli.params import ID, MEMORY_REF
from memsync.cli.store.admin import admin_options, run_with_client
from memsync.client import StoreClient, errors

PAGE: Final = 100  # the API's largest page


# --------------------------------------------------------------------------------------------------
# Pure helpers: sizes, the tree, the history table
# --------------------------------------------------------------------------------------------------


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024 or unit == "MiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else "-"


@dataclass
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    memory: Memory | None = None


def render_tree(root_label: str, memories: Sequence[Memory]) -> str:
    """Memories as a directory tree (``tree`` style), each file with its size and memory id."""
    root = _Node()
    for memory in memories:
        node = root
        for segment in memory.path.strip("/").split("/"):
            node = node.children.setdefault(segment, _Node())
        node.memory = memory
    rows: list[tuple[str, str, str]] = []  # (tree text, size, memory id); a folder has no size or id

    def walk(node: _Node, prefix: str) -> None:
        names = sorted(node.children, key=lambda s: s.encode("utf-8"))
        for i, name in enumerate(names):
            child = node.children[name]
            last = i == len(names) - 1
            branch = "└── " if last else "├── "
            if child.memory is not None and not child.children:
                m = child.memory
                rows.append((prefix + branch + name, human_size(m.content_size_bytes), m.id))
            else:
                rows.append((prefix + branch + name + "/", "", ""))
                walk(child, prefix + ("    " if last else "│   "))

    walk(root, "")
    total = sum(m.content_size_bytes for m in memories)
    count = len(memories)
    head = f"{root_label} ({count} {'memory' if count == 1 else 'memories'}, {human_size(total)})"
    text_w = max((len(text) for text, _, _ in rows), default=0)
    size_w = max((len(size) for _, size, _ in rows), default=0)
    lines = [f"{text:<{text_w}}   {size:>{size_w}}   {mid}" if mid else text for text, size, mid in rows]
    return "\n".join([head, *lines])


def actor(version: MemoryVersion) -> str:
    """Who wrote a version: a session, an API key, a user or a service account."""
    who = version.created_by
    if who is None:
        return "-"
    for name in ("session_id", "api_key_id", "user_id", "service_account_id"):
        value = getattr(who, name, None)
        if value:
            return str(value)
    return "-"


def render_history(versions: Sequence[MemoryVersion]) -> str:
    headers = ["VERSION", "OPERATION", "CREATED", "BY", "SIZE", "SHA256", "PATH", "REDACTED"]
    rows = [
        [
            v.id,
            v.operation,
            _time(v.created_at),
            actor(v),
            human_size(v.content_size_bytes) if v.content_size_bytes is not None else "-",
            (v.content_sha256 or "-")[:12],
            v.path or "-",
            _time(v.redacted_at) if v.redacted_at else "no",
        ]
        for v in versions
    ]
    grid = [headers, *rows]
    widths = [max(len(r[i]) for r in grid) for i in range(len(headers))]
    return "\n".join("   ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in grid)


def render_store(store: MemoryStore, memories: int, total_bytes: int) -> str:
    metadata = ", ".join(f"{k}={v}" for k, v in sorted(store.metadata.items())) or "-"
    fields = [
        ("id", store.id),
        ("name", store.name),
        ("description", store.description or "-"),
        ("created", _time(store.created_at)),
        ("updated", _time(store.updated_at)),
        ("archived", _time(store.archived_at) if store.archived_at else "no"),
        ("metadata", metadata),
        ("memories", f"{memories} ({human_size(total_bytes)})"),
    ]
    return "\n".join(f"{k + ':':<13}{v}" for k, v in fields)


# --------------------------------------------------------------------------------------------------
# I/O helpers
# --------------------------------------------------------------------------------------------------


@contextmanager
def about(argument: str, value: str) -> Iterator[None]:
    """A refusal the server gives about one argument (not found, bad id, conflict) names it."""
    try:
        yield
    except (errors.NotFound, errors.BadRequest, errors.Conflict, errors.PermissionDenied) as exc:
        raise CliError(f"{argument} {value!r}: {exc}", store_exit_code(exc)) from exc


def confirm_or_refuse(question: str, yes: bool) -> None:
    """Go on when ``--yes`` was given or the person at the terminal agrees; never guess on a pipe."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError("this cannot be undone: pass --yes to confirm (stdin is not a terminal)")
    click.confirm(question, abort=True, err=True)


def emit(model: BaseModel, as_json: bool, text: str, extra: dict[str, Any] | None = None) -> None:
    """The API object as JSON (with ``extra`` fields, never its content), or ``text``."""
    if not as_json:
        click.echo(text)
        return
    click.echo(json.dumps({**model.model_dump(mode="json", exclude={"content"}), **(extra or {})}))


async def all_memories(
    client: StoreClient, store_id: str, prefix: str | None = None, depth: int | None = None
) -> list[Memory]:
    """The memories (ids, paths, sizes; no content) below ``prefix``; ``depth=1``: only its direct files."""
    listing = client.list_memories(store_id, view="basic", limit=PAGE, path_prefix=prefix, depth=depth)
    return [m async for m in listing if isinstance(m, Memory)]


def store_id_argument(func: Any) -> Any:
    return click.argument("store_id", metavar="STORE_ID", type=ID)(func)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


# --------------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------------


@click.command()
@store_id_argument
@json_option
@admin_options
def show(*, store_id: str, as_json: bool, url: str, admin_key_file: Path | None) -> None:
    """Show a store: name, description, times, metadata, and how many memories it holds."""

    async def work(client: StoreClient) -> None:
        with about("STORE_ID", store_id):
            info = await client.get_store(store_id)
            held = await all_memories(client, store_id)
        total = sum(m.content_size_bytes for m in held)
        extra = {"memory_count": len(held), "total_size_bytes": total}
        emit(info, as_json, render_store(info, len(held), total), extra)

    run_with_client(url, admin_key_file, work)


@click.command()
@store_id_argument
@yes_option
@json_option
@admin_options
def delete(*, store_id: str, yes: bool, as_json: bool, url: str, admin_key_file: Path | None) -> None:
    """Delete a store with all its memories and their versions (asks first; --yes to skip)."""

    async def work(client: StoreClient) -> None:
        with about("STORE_ID", store_id):
            info = await client.get_store(store_id)
            count = len(await all_memories(client, store_id))
            confirm_or_refuse(
                f"Delete store {info.id} ({info.name!r}) with its {count} memories and all their versions?",
                yes,
            )
            deleted = await client.delete_store(store_id)
        emit(deleted, as_json, f"deleted {deleted.id}")

    run_with_client(url, admin_key_file, work)


@click.command()
@store_id_argument
@json_option
@admin_options
def archive(*, store_id: str, as_json: bool, url: str, admin_key_file: Path | None) -> None:
    """Archive a store: it stays readable, refuses writes, and cannot be attached to new sessions."""

    async def work(client: StoreClient) -> None:
        with about("STORE_ID", store_id):
            info = await client.archive_store(store_id)
        emit(info, as_json, f"archived {info.id} at {_time(info.archived_at)}")

    run_with_client(url, admin_key_file, work)


@click.command()
@store_id_argument
@click.option("--prefix", default=None, help="Only the memories below this folder (ends in /, e.g. /notes/).")
@json_option
@admin_options
def memories(
    *, store_id: str, prefix: str | None, as_json: bool, url: str, admin_key_file: Path | None
) -> None:
    """A store's memories as a tree, with sizes and memory ids (--json: one memory per line, no content)."""

    async def work(client: StoreClient) -> None:
        with about("STORE_ID" if prefix is None else "--prefix", store_id if prefix is None else prefix):
            found = await all_memories(client, store_id, prefix)
        if as_json:
            for memory in found:
                click.echo(memory.model_dump_json(exclude={"content"}))
        else:
            click.echo(render_tree(store_id + (f" {prefix}" if prefix else ""), found))

    run_with_client(url, admin_key_file, work)


async def resolve_memory(client: StoreClient, store_id: str, memory: str) -> str:
    """A memory id from MEMORY: an id as given, or the id of the memory at a path (``/...``)."""
    if not memory.startswith("/"):
        return memory
    folder = memory.rsplit("/", 1)[0] + "/"
    with about("MEMORY", memory):
        for item in await all_memories(client, store_id, folder, depth=1):
            if item.path == memory:
                return item.id
    raise CliError(
        f"MEMORY {memory!r}: no memory at this path in {store_id} (a deleted memory's history needs its "
        "id, mem_...; `memsync store memories` lists the ids)",
        ExitCode.NOT_FOUND,
    )


@click.command()
@store_id_argument
@click.argument("memory", metavar="MEMORY", type=MEMORY_REF)
@json_option
@admin_options
def history(*, store_id: str, memory: str, as_json: bool, url: str, admin_key_file: Path | None) -> None:
    """A memory's versions, newest first. MEMORY is its id (mem_...) or its path (/notes/todo.md)."""

    async def work(client: StoreClient) -> None:
        memory_id = await resolve_memory(client, store_id, memory)
        with about("MEMORY", memory):
            versions = [
                v async for v in client.list_versions(store_id, memory_id=memory_id, view="basic", limit=PAGE)
            ]
        if not versions:
            raise CliError(f"MEMORY {memory!r}: no versions in {store_id}", ExitCode.NOT_FOUND)
        if as_json:
            for version in versions:
                click.echo(version.model_dump_json(exclude={"content"}))
        else:
            click.echo(render_history(versions))

    run_with_client(url, admin_key_file, work)


@click.command()
@store_id_argument
@click.argument("version_id", metavar="VERSION_ID", type=ID)
@yes_option
@json_option
@admin_options
def redact(
    *, store_id: str, version_id: str, yes: bool, as_json: bool, url: str, admin_key_file: Path | None
) -> None:
    """Erase the content of one version for good (e.g. a leaked secret); asks first, --yes to skip.

    The head version of a live memory cannot be redacted: write a new version or delete the memory first.
    """

    async def work(client: StoreClient) -> None:
        with about("VERSION_ID", version_id):
            version = await client.get_version(store_id, version_id, view="basic")
            confirm_or_refuse(
                f"Redact {version.id} ({version.operation} of {version.path or version.memory_id}, "
                f"{_time(version.created_at)})? Its content is erased for good.",
                yes,
            )
            redacted = await client.redact_version(store_id, version_id)
        emit(
            redacted,
            as_json,
            f"redacted {redacted.id} of {redacted.memory_id} at {_time(redacted.redacted_at)}",
        )

    run_with_client(url, admin_key_file, work)
