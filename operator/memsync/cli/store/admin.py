"""``memsync store create|list|token|admin-key|viewer-key``: administer a store server over HTTP with the
admin key.

The admin key is never a command-line value (it would show in ``ps``): it comes from ``MEMSYNC_ADMIN_KEY``
or a file. ``run_with_client`` is how every admin command (here, in ``transfer`` and in
``inspect``) talks to the server.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import click

from memsync import pid1
from memsync.api.models import MemoryStore, MemoryStoreResource
from memsync.cli.failures import CliError, ExitCode, store_failure
from memsync.cli.output import dump, is_data, listing, output_options, timestamp
from memsync.cli.params import ID, check_url
from memsync.client import StoreClient, errors
from memsync.status.table import table

ADMIN_KEY_ENV = "MEMSYNC_ADMIN_KEY"
DEFAULT_URL = "http://127.0.0.1:8700"

F = TypeVar("F", bound=Callable[..., Any])


# --- admin key ------------------------------------------------------------------------------------------


def read_key_file(path: Path) -> str:
    """The key in ``path``; a file that cannot be read, or holds nothing, is a configuration error (2)."""
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise CliError(f"--admin-key-file: cannot read {path}: {why}", ExitCode.USAGE) from None
    if not key:
        raise CliError(f"--admin-key-file: {path} is empty", ExitCode.USAGE)
    return key


def load_or_create_key_file(path: Path) -> tuple[str, bool]:
    """The key in ``path``; if the file does not exist, a new random key written there with mode 0600."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return read_key_file(path), False
    key = "sk-memsync-admin-" + secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(key + "\n")
    return key, True


def admin_key_from(key_file: Path | None) -> str:
    if key_file is not None:
        return read_key_file(key_file)
    key = os.environ.get(ADMIN_KEY_ENV, "").strip()
    if not key:
        raise click.UsageError(f"no admin key: set {ADMIN_KEY_ENV} or pass --admin-key-file")
    return key


# --- admin commands -------------------------------------------------------------------------------------


def admin_options(func: F) -> F:
    func = click.option(
        "--admin-key-file",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar="MEMSYNC_ADMIN_KEY_FILE",
        show_envvar=True,
        help=f"File holding the admin key (default: ${ADMIN_KEY_ENV}).",
    )(func)
    func = click.option(
        "--url",
        envvar="MEMSYNC_STORE_URL",
        default=DEFAULT_URL,
        show_default=True,
        show_envvar=True,
        callback=check_url,
        help="The store server.",
    )(func)
    return func


T = TypeVar("T")


def run_with_client(
    url: str,
    key_file: Path | None,
    work: Callable[[StoreClient], Awaitable[T]],
    *,
    interruptible: str | None = None,
) -> T:
    """``work`` with a client of the server at ``url``; a store error becomes one line and its exit code.
    ``interruptible`` (what the work is, for the log): SIGINT and SIGTERM cancel the work at its next await
    and raise ``pid1.Signalled``, so the command can say what it had done before it exits 130 or 143."""
    key = admin_key_from(key_file)

    async def main() -> T:
        async with StoreClient(url, api_key=key) as client:
            return await work(client)

    async def guarded() -> T:
        return await pid1.cancel_on_signal(main, what=interruptible or "the command")

    try:
        return asyncio.run(guarded() if interruptible else main())
    except errors.StoreError as exc:
        raise store_failure(exc, url) from exc


@click.command()
@click.argument("name")
@click.option("--description", default=None, help="Shown to the agent; at most 1,024 characters.")
@output_options
@admin_options
def create(*, name: str, description: str | None, output: str, url: str, admin_key_file: Path | None) -> None:
    """Create a memory store; print its id (-o json|yaml: the whole store object)."""

    async def work(client: StoreClient) -> None:
        created = await client.create_store(name, description=description)
        click.echo(dump(created.model_dump(mode="json"), output) if is_data(output) else created.id)

    run_with_client(url, admin_key_file, work)


def render_stores(stores: list[MemoryStore], *, wide: bool) -> str:
    headers = ["ID", "NAME", "CREATED", "ARCHIVED"] + (["UPDATED", "DESCRIPTION"] if wide else [])
    rows = [
        [s.id, s.name, timestamp(s.created_at), timestamp(s.archived_at) if s.archived_at else "no"]
        + ([timestamp(s.updated_at), s.description or "-"] if wide else [])
        for s in stores
    ]
    return table(headers, rows)


@click.command("list")
@click.option("--include-archived", is_flag=True)
@output_options
@admin_options
def list_(*, include_archived: bool, output: str, url: str, admin_key_file: Path | None) -> None:
    """List memory stores (newest first)."""

    async def work(client: StoreClient) -> list[MemoryStore]:
        return [s async for s in client.list_stores(include_archived=include_archived, limit=100)]

    stores = run_with_client(url, admin_key_file, work)
    if is_data(output):
        click.echo(dump(listing(s.model_dump(mode="json") for s in stores), output))
    else:
        click.echo(render_stores(stores, wide=output == "wide"))


# --- token ----------------------------------------------------------------------------------------------


def parse_store_spec(spec: str) -> tuple[str, str]:
    """``memstore_...`` or ``memstore_...:read_only`` / ``:read_write`` → (id, access)."""
    store_id, _, access = spec.partition(":")
    access = access or "read_write"
    if not store_id.startswith("memstore_"):
        raise click.BadParameter(f"{spec!r}: expected memstore_...[:read_only|:read_write]")
    if access not in ("read_only", "read_write"):
        raise click.BadParameter(f"{spec!r}: access must be read_only or read_write")
    return store_id, access


@click.group(invoke_without_command=True)
@click.option(
    "--session", "session_id", type=ID, default=None, help="Session id (sesn_...); generated when omitted."
)
@click.option(
    "--store",
    "stores",
    multiple=True,
    help="memstore_...[:read_only]; repeat for more stores (at most 8). Required to mint.",
)
@click.option(
    "--ttl",
    type=click.IntRange(min=1),
    default=None,
    help="Seconds the sessions token stays valid, at most 90 days (default: the server's "
    "--session-token-ttl).",
)
@admin_options
@click.pass_context
def token(
    ctx: click.Context,
    *,
    session_id: str | None,
    stores: tuple[str, ...],
    ttl: int | None,
    url: str,
    admin_key_file: Path | None,
) -> None:
    """Mint a session with the given stores attached; print its work-item secret (and nothing else) on
    stdout. ``token revoke SESSION_ID`` deletes a session, revoking its token."""
    if ctx.invoked_subcommand is not None:
        return
    if not stores:
        raise click.UsageError("Missing option '--store' (at least one store to attach)")
    specs = [parse_store_spec(s) for s in stores]

    async def work(client: StoreClient) -> str:
        resources = [
            MemoryStoreResource.model_validate({"memory_store_id": sid, "access": acc}) for sid, acc in specs
        ]
        session, secret = await client.mint_session(resources, session_id=session_id, token_ttl_seconds=ttl)
        click.echo(f"minted session {session.id}", err=True)
        for res in session.resources:
            click.echo(f"  {res.memory_store_id} at {res.mount_path} ({res.access})", err=True)
        return secret

    secret = run_with_client(url, admin_key_file, work)
    click.echo(secret)


@token.command("revoke")
@click.argument("session_id", type=ID)
@admin_options
def token_revoke(*, session_id: str, url: str, admin_key_file: Path | None) -> None:
    """Delete a session: its sessions token stops working at once (on every replica within seconds)."""

    async def work(client: StoreClient) -> None:
        await client.delete_session(session_id)

    run_with_client(url, admin_key_file, work)
    click.echo(f"revoked the sessions token of {session_id}", err=True)


# --- named keys: admin keys and viewer keys --------------------------------------------------------------


def key_group(kind: str, help_text: str) -> click.Group:
    """``memsync store {kind}-key create|list|revoke`` over ``/v1/memsync/{kind}_keys``."""
    noun, collection = f"{kind} key", f"{kind}_keys"

    @click.group(f"{kind}-key", help=help_text)
    def group() -> None:
        pass

    @group.command(
        "create",
        help=f"Create a{'n' if kind[0] in 'aeiou' else ''} {noun}; print the key (shown "
        "only this once) on stdout, its id on stderr.",
    )
    @click.argument("name")
    @admin_options
    def create(*, name: str, url: str, admin_key_file: Path | None) -> None:
        made = run_with_client(
            url, admin_key_file, lambda c: c.named_keys(collection, "POST", body={"name": name})
        )
        click.echo(f"created {noun} {made['id']} ({made['name']})", err=True)
        click.echo(made["key"])

    @group.command("list", help=f"List {noun}s (ids and names; never the keys).")
    @output_options
    @admin_options
    def list_keys(*, output: str, url: str, admin_key_file: Path | None) -> None:
        listed = run_with_client(url, admin_key_file, lambda c: c.named_keys(collection, "GET"))
        rows = [row for row in listed["data"] if isinstance(row, dict)]
        if is_data(output):
            click.echo(dump(listing({k: v for k, v in row.items() if k != "key"} for row in rows), output))
            return
        states = [f"revoked {row['revoked_at']}" if row["revoked_at"] else "current" for row in rows]
        click.echo(
            table(
                ["ID", "NAME", "CREATED", "STATE"],
                [
                    [row["id"], row["name"], row["created_at"], state]
                    for row, state in zip(rows, states, strict=True)
                ],
            )
        )

    @group.command("revoke", help=REVOKE_HELP[kind])
    @click.argument("key_id", type=ID)
    @admin_options
    def revoke(*, key_id: str, url: str, admin_key_file: Path | None) -> None:
        run_with_client(url, admin_key_file, lambda c: c.named_keys(collection, "POST", f"/{key_id}/revoke"))
        click.echo(f"revoked {noun} {key_id}", err=True)

    return group


REVOKE_HELP: Final = {
    "admin": "Revoke an admin key by id (apikey_...); the last current key cannot be revoked.",
    "viewer": "Revoke a viewer key by id (viewerkey_...); its store browser sessions end at once.",
}
ADMIN_KEY_HELP: Final = (
    "Named admin keys: several may be current at once, so a key can be rotated (create the new key, move "
    "the clients to it, revoke the old one)."
)
VIEWER_KEY_HELP: Final = (
    "Named viewer keys: read-only keys for the store browser (/ui/) and the API's reads; they list and "
    "read every store and write nothing."
)
admin_key = key_group("admin", ADMIN_KEY_HELP)
viewer_key = key_group("viewer", VIEWER_KEY_HELP)
