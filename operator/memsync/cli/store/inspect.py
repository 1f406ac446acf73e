"""``memsync store show|delete|archive|memories|history|cat|redact``: look into a store and manage it.

Each command talks to the server with the store client and the admin key (see ``memsync.cli.store``) and
names the argument a refusal is about. Every command that prints an object takes ``-o table|wide|json|yaml``
(``memsync.cli.output``): the single-object commands print the one object, the listings (``memories``,
``history``) one ``{"items": [...]}`` document. Only ``cat`` prints memory content: the listings use the
API's ``basic`` view. Deleted memories stay reachable: ``memories --deleted`` lists them (from their
``deleted`` versions), and ``history``, ``cat --version`` and ``redact`` take their ids (or their last path).
The destructive commands (``delete``, ``redact``) ask first, or need ``--yes`` when stdin is not a terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

import click
from pydantic import BaseModel

from memsync.api.models import Memory, MemoryStore, MemoryVersion
from memsync.cli.failures import CliError, ExitCode, store_exit_code
from memsync.cli.output import dump, is_data, listing, output_options, timestamp
from memsync.cli.params import ID, MEMORY_REF, normalise_prefix
from memsync.cli.store.admin import admin_options, run_with_client
from memsync.client import StoreClient, errors
from memsync.status.table import table

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


def render_history(versions: Sequence[MemoryVersion], *, wide: bool = False) -> str:
    """Versions as a table; ``wide``: the whole hash and the memory id too."""
    headers = ["VERSION", "OPERATION", "CREATED", "BY", "SIZE", "SHA256", "PATH", "REDACTED"]
    rows = [
        [
            v.id,
            v.operation,
            timestamp(v.created_at),
            actor(v),
            human_size(v.content_size_bytes) if v.content_size_bytes is not None else "-",
            (v.content_sha256 or "-") if wide else (v.content_sha256 or "-")[:12],
            v.path or "-",
            timestamp(v.redacted_at) if v.redacted_at else "no",
        ]
        for v in versions
    ]
    if wide:
        headers.append("MEMORY")
        for v, row in zip(versions, rows, strict=True):
            row.append(v.memory_id)
    return table(headers, rows)


def render_memories(memories: Sequence[Memory]) -> str:
    """``memories -o wide``: one row per memory, with its hash and last update."""
    rows = [
        [m.path, human_size(m.content_size_bytes), m.content_sha256[:12], timestamp(m.updated_at), m.id]
        for m in sorted(memories, key=lambda m: m.path.encode("utf-8"))
    ]
    return table(["PATH", "SIZE", "SHA256", "UPDATED", "MEMORY"], rows)


def render_deleted(deletions: Sequence[MemoryVersion], *, wide: bool = False) -> str:
    """``memories --deleted``: each deleted memory's last path, when and by whom it was deleted."""
    headers = ["PATH", "DELETED", "BY", "MEMORY"] + (["DELETION VERSION"] if wide else [])
    rows = [
        [v.path or "-", timestamp(v.created_at), actor(v), v.memory_id] + ([v.id] if wide else [])
        for v in deletions
    ]
    return table(headers, rows)


def deleted_only(
    deletions: Sequence[MemoryVersion], live: set[str], prefix: str | None
) -> list[MemoryVersion]:
    """The memories deleted for good, by their newest ``deleted`` version (``deletions``: newest first): one
    per memory id, none still live, only paths below ``prefix``."""
    found: dict[str, MemoryVersion] = {}
    for version in deletions:
        if version.memory_id in live or version.memory_id in found:
            continue
        if prefix is None or (version.path or "").startswith(prefix):
            found[version.memory_id] = version
    return list(found.values())


def render_store(store: MemoryStore, memories: int, total_bytes: int) -> str:
    metadata = ", ".join(f"{k}={v}" for k, v in sorted(store.metadata.items())) or "-"
    fields = [
        ("id", store.id),
        ("name", store.name),
        ("description", store.description or "-"),
        ("created", timestamp(store.created_at)),
        ("updated", timestamp(store.updated_at)),
        ("archived", timestamp(store.archived_at) if store.archived_at else "no"),
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


def emit(model: BaseModel, output: str, text: str, extra: dict[str, Any] | None = None) -> None:
    """The API object as JSON or YAML (with ``extra`` fields, never its content), or ``text`` (table and
    wide: one object has no more columns to show)."""
    if not is_data(output):
        click.echo(text)
        return
    click.echo(dump({**model.model_dump(mode="json", exclude={"content"}), **(extra or {})}, output))


def print_items(models: Sequence[BaseModel], output: str) -> None:
    """API objects as one json or yaml listing, never with their content."""
    click.echo(dump(listing(m.model_dump(mode="json", exclude={"content"}) for m in models), output))


async def deleted_memories(
    client: StoreClient, store_id: str, prefix: str | None = None
) -> list[MemoryVersion]:
    """Deleted memories, newest deletion first, as their ``deleted`` versions (no content)."""
    live = {m.id for m in await all_memories(client, store_id)}
    listed = client.list_versions(store_id, operation="deleted", view="basic", limit=PAGE)
    return deleted_only([v async for v in listed], live, prefix)


async def all_memories(
    client: StoreClient, store_id: str, prefix: str | None = None, depth: int | None = None
) -> list[Memory]:
    """The memories (ids, paths, sizes; no content) below ``prefix``; ``depth=1``: only its direct files."""
    listing = client.list_memories(store_id, view="basic", limit=PAGE, path_prefix=prefix, depth=depth)
    return [m async for m in listing if isinstance(m, Memory)]


def store_id_argument(func: Any) -> Any:
    return click.argument("store_id", metavar="STORE_ID", type=ID)(func)


yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


# --------------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------------


@click.command()
@store_id_argument
@output_options
@admin_options
def show(*, store_id: str, output: str, url: str, admin_key_file: Path | None) -> None:
    """Show a store: name, description, times, metadata, and how many memories it holds."""

    async def work(client: StoreClient) -> None:
        with about("STORE_ID", store_id):
            info = await client.get_store(store_id)
            held = await all_memories(client, store_id)
        total = sum(m.content_size_bytes for m in held)
        extra = {"memory_count": len(held), "total_size_bytes": total}
        emit(info, output, render_store(info, len(held), total), extra)

    run_with_client(url, admin_key_file, work)


@click.command()
@store_id_argument
@yes_option
@output_options
@admin_options
def delete(*, store_id: str, yes: bool, output: str, url: str, admin_key_file: Path | None) -> None:
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
        emit(deleted, output, f"deleted {deleted.id}")

    run_with_client(url, admin_key_file, work)


@click.command()
@store_id_argument
@output_options
@admin_options
def archive(*, store_id: str, output: str, url: str, admin_key_file: Path | None) -> None:
    """Archive a store: it stays readable, refuses writes, and cannot be attached to new sessions."""

    async def work(client: StoreClient) -> None:
        with about("STORE_ID", store_id):
            info = await client.archive_store(store_id)
        emit(info, output, f"archived {info.id} at {timestamp(info.archived_at)}")

    run_with_client(url, admin_key_file, work)


@click.command()
@store_id_argument
@click.option(
    "--prefix",
    default=None,
    callback=normalise_prefix,
    help="Only the memories below this folder (/notes/; notes and notes/ are the same).",
)
@click.option(
    "--deleted",
    is_flag=True,
    help="The deleted memories instead: each one's last path, when and by whom, and its id (for history, "
    "cat --version and redact).",
)
@output_options
@admin_options
def memories(
    *, store_id: str, prefix: str | None, deleted: bool, output: str, url: str, admin_key_file: Path | None
) -> None:
    """A store's memories as a tree, with sizes and memory ids (-o json|yaml: no content)."""

    async def work(client: StoreClient) -> None:
        with about("STORE_ID" if prefix is None else "--prefix", store_id if prefix is None else prefix):
            found: Sequence[BaseModel] = (
                await deleted_memories(client, store_id, prefix)
                if deleted
                else await all_memories(client, store_id, prefix)
            )
        if is_data(output):
            print_items(found, output)
        elif deleted:
            click.echo(render_deleted(cast(list[MemoryVersion], found), wide=output == "wide"))
        elif output == "wide":
            click.echo(render_memories(cast(list[Memory], found)))
        else:
            click.echo(render_tree(store_id + (f" {prefix}" if prefix else ""), cast(list[Memory], found)))

    run_with_client(url, admin_key_file, work)


async def resolve_memory(client: StoreClient, store_id: str, memory: str) -> str:
    """A memory id from MEMORY: an id as given, or the id of the memory at a path (``/...``): the live one,
    else the one deleted last at that path."""
    if not memory.startswith("/"):
        return memory
    folder = memory.rsplit("/", 1)[0] + "/"
    with about("MEMORY", memory):
        for item in await all_memories(client, store_id, folder, depth=1):
            if item.path == memory:
                return item.id
        for gone in await deleted_memories(client, store_id, folder):
            if gone.path == memory:
                return gone.memory_id
    raise CliError(
        f"MEMORY {memory!r}: no memory, live or deleted, at this path in {store_id} "
        "(`memsync store memories` and `memsync store memories --deleted` list them)",
        ExitCode.NOT_FOUND,
    )


@click.command()
@store_id_argument
@click.argument("memory", metavar="MEMORY", type=MEMORY_REF)
@output_options
@admin_options
def history(*, store_id: str, memory: str, output: str, url: str, admin_key_file: Path | None) -> None:
    """A memory's versions, newest first. MEMORY is its id (mem_...) or its path (/notes/todo.md); a
    deleted memory's too."""

    async def work(client: StoreClient) -> None:
        memory_id = await resolve_memory(client, store_id, memory)
        with about("MEMORY", memory):
            versions = [
                v async for v in client.list_versions(store_id, memory_id=memory_id, view="basic", limit=PAGE)
            ]
        if not versions:
            raise CliError(f"MEMORY {memory!r}: no versions in {store_id}", ExitCode.NOT_FOUND)
        if is_data(output):
            print_items(versions, output)
        else:
            click.echo(render_history(versions, wide=output == "wide"))

    run_with_client(url, admin_key_file, work)


@click.command()
@store_id_argument
@click.argument("memory", metavar="MEMORY", type=MEMORY_REF, required=False)
@click.option(
    "--version",
    "version_id",
    type=ID,
    default=None,
    help="Print this version's content instead (memver_..., from `store history`): also of a deleted memory.",
)
@admin_options
def cat(
    *, store_id: str, memory: str | None, version_id: str | None, url: str, admin_key_file: Path | None
) -> None:
    """Print a memory's content: MEMORY (its id or path), or one version of it with --version."""
    if (memory is None) == (version_id is None):
        raise click.UsageError("give MEMORY or --version VERSION_ID (one of them)")

    async def work(client: StoreClient) -> str:
        if version_id is not None:
            with about("--version", version_id):
                version = await client.get_version(store_id, version_id, view="full")
            return version_content(version)
        assert memory is not None
        memory_id = await resolve_memory(client, store_id, memory)
        with about("MEMORY", memory):
            try:
                return (await client.get_memory(store_id, memory_id, view="full")).content or ""
            except errors.NotFound:
                raise CliError(
                    f"MEMORY {memory!r}: deleted; print one of its versions with --version "
                    f"(`memsync store history {store_id} {memory}` lists them)",
                    ExitCode.NOT_FOUND,
                ) from None

    click.echo(run_with_client(url, admin_key_file, work), nl=False)


def version_content(version: MemoryVersion) -> str:
    """A version's content, or why it has none (redacted, or the record of a deletion)."""
    if version.redacted_at is not None:
        raise CliError(
            f"--version {version.id!r}: redacted at {timestamp(version.redacted_at)}", ExitCode.NOT_FOUND
        )
    if version.content is None:
        raise CliError(
            f"--version {version.id!r}: a {version.operation} version holds no content", ExitCode.NOT_FOUND
        )
    return version.content


@click.command()
@store_id_argument
@click.argument("version_id", metavar="VERSION_ID", type=ID)
@yes_option
@output_options
@admin_options
def redact(
    *, store_id: str, version_id: str, yes: bool, output: str, url: str, admin_key_file: Path | None
) -> None:
    """Erase the content of one version for good (e.g. a leaked secret); asks first, --yes to skip.

    The head version of a live memory cannot be redacted: write a new version or delete the memory first.
    """

    async def work(client: StoreClient) -> None:
        with about("VERSION_ID", version_id):
            version = await client.get_version(store_id, version_id, view="basic")
            confirm_or_refuse(
                f"Redact {version.id} ({version.operation} of {version.path or version.memory_id}, "
                f"{timestamp(version.created_at)})? Its content is erased for good.",
                yes,
            )
            redacted = await client.redact_version(store_id, version_id)
        emit(
            redacted,
            output,
            f"redacted {redacted.id} of {redacted.memory_id} at {timestamp(redacted.redacted_at)}",
        )

    run_with_client(url, admin_key_file, work)
