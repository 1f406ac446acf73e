"""The stores of a session, as the session says (``GET /v1/sessions/{id}`` with the sessions token).

``memsync mount`` is where the session is readable (it holds the sessions token), so the stores are resolved
there: a SessionMemory without ``spec.stores`` (``MEMSYNC_STORES=session``) mounts the session's memory
stores, and mount writes them into the state directory for the sidecar and the preStop flush; given stores
are checked against the session. The rules are pure functions; the reading and writing are at the bottom.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from memsync.agent.config import AgentConfig, ConfigError, StoreConfig, with_stores
from memsync.agent.state import write_atomic
from memsync.api.constants import MOUNT_ROOT
from memsync.api.models import Session
from memsync.api.paths import is_ancestor
from memsync.client import StoreClient
from memsync.client import errors as store_errors
from memsync.contracts import env
from memsync.contracts.stores import StoreEntry, encode_stores

logger = logging.getLogger("memsync.agent")


class SessionStoresError(ValueError):
    """The session's stores cannot be used; the message names the store and the field."""

    def __init__(self, message: str, store: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.store = store


# --- rules ------------------------------------------------------------------------------------------------


def session_entries(session: Session) -> list[StoreEntry]:
    """The session's memory stores as ``MEMSYNC_STORES`` entries (its mount paths; a store without a name
    is named by its id), each checked like a given store."""
    entries: list[StoreEntry] = []
    for i, res in enumerate(session.resources):
        entry = StoreEntry(
            memory_store_id=res.memory_store_id,
            name=res.name or res.memory_store_id,
            mount_path=res.mount_path or "",
            access=res.access or "read_write",
        )
        where = f"session {session.id} resources[{i}] ({res.memory_store_id})"
        try:
            checked = StoreConfig.model_validate(entry.model_dump())
        except ValidationError as exc:
            problem = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
            raise SessionStoresError(f"{where} cannot be mounted: {problem}", res.memory_store_id) from None
        if not is_ancestor(MOUNT_ROOT, checked.mount_path):
            raise SessionStoresError(
                f"{where} cannot be mounted: mount_path {checked.mount_path!r} is not under {MOUNT_ROOT}/",
                res.memory_store_id,
            )
        entries.append(checked)
    return entries


def disagreement(
    given: Sequence[StoreConfig], session: Sequence[StoreEntry], session_id: str
) -> tuple[str, str | None] | None:
    """Why the given stores (``spec.stores``, in order) contradict the session's: a store the session does
    not attach, a store it attaches that the spec lacks, or another access. None when they agree. (Names and
    mount paths may differ: see ``mount_path_differences``.) Answers (message, the first store named)."""
    theirs = {s.memory_store_id: s for s in session}
    mine = {s.memory_store_id for s in given}
    problems: list[tuple[str, str]] = []
    for i, store in enumerate(given):
        other = theirs.get(store.memory_store_id)
        if other is None:
            problems.append(
                (
                    f"spec.stores[{i}] ({store.memory_store_id}) is not attached to the session",
                    store.memory_store_id,
                )
            )
        elif other.access != store.access:
            problems.append(
                (
                    f"spec.stores[{i}].access of {store.memory_store_id} is {store.access}, the session "
                    f"attaches it {other.access}",
                    store.memory_store_id,
                )
            )
    problems += [
        (f"the session also attaches {sid}, which spec.stores lacks", sid)
        for sid in theirs
        if sid not in mine
    ]
    if not problems:
        return None
    text = "; ".join(p for p, _ in problems)
    return f"spec.stores disagree with session {session_id}: {text}", problems[0][1]


def mount_path_differences(given: Sequence[StoreConfig], session: Sequence[StoreEntry]) -> list[str]:
    """Given stores mounted somewhere other than where the session says (the agent's instructions may name
    the session's path): reported, not refused."""
    theirs = {s.memory_store_id: s.mount_path for s in session}
    return [
        f"spec.stores[{i}] mounts {s.memory_store_id} at {s.mount_path}, the session at "
        f"{theirs[s.memory_store_id]}"
        for i, s in enumerate(given)
        if theirs.get(s.memory_store_id) not in (None, "", s.mount_path)
    ]


# --- I/O ----------------------------------------------------------------------------------------------------


async def resolve(config: AgentConfig, client: StoreClient) -> AgentConfig:
    """The configuration with the session's stores (``MEMSYNC_STORES=session``), or the given one after
    checking it against the session. Raises SessionStoresError with a message naming the store and field."""
    if config.session_id is None:
        if config.stores_from_session:
            raise SessionStoresError(
                f"stores ({env.STORES}={env.STORES_FROM_SESSION}) come from the session, but no session is "
                f"named ({env.SESSION_ID})"
            )
        return config  # nothing to check against
    try:
        session = await client.get_session(config.session_id)
    except store_errors.StoreError as exc:
        if config.stores_from_session:
            raise SessionStoresError(
                f"cannot read session {config.session_id} to find its memory stores "
                f"(GET /v1/sessions/{config.session_id}): {exc}"
            ) from None
        logger.warning(
            "cannot read the session to check the stores against it; mounting the given stores",
            extra={"session_id": config.session_id, "error": str(exc)},
        )
        return config
    resolved = session_entries(session)
    if config.stores_from_session:
        if not resolved:
            raise SessionStoresError(
                f"session {config.session_id} attaches no memory stores: nothing to mount"
            )
        try:
            return with_stores(config, resolved)
        except ConfigError as exc:
            raise SessionStoresError(
                f"session {config.session_id}'s stores cannot be mounted: {exc}"
            ) from None
    problem = disagreement(config.stores, resolved, config.session_id)
    if problem is not None:
        raise SessionStoresError(*problem)
    for text in mount_path_differences(config.stores, resolved):
        logger.warning(text, extra={"session_id": config.session_id})
    return config


def _resolved_path(config: AgentConfig) -> Path:
    return config.state_path / env.RESOLVED_STORES_FILE


def save_resolved(config: AgentConfig) -> None:
    """After a mount from the session: the stores, for the sidecar and the preStop flush."""
    write_atomic(config.state_path, env.RESOLVED_STORES_FILE, encode_stores(config.stores).encode("utf-8"))


def load_resolved(config: AgentConfig) -> AgentConfig:
    """The sidecar's and the flush's configuration: the stores ``memsync mount`` read from the session."""
    if not config.stores_from_session:
        return config
    path = _resolved_path(config)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"stores ({env.STORES}={env.STORES_FROM_SESSION}): {path} (written by memsync mount from the "
            f"session) cannot be read: {exc}"
        ) from None
    if not isinstance(raw, list):
        raise ConfigError(f"stores: {path} does not hold a list of stores")
    return with_stores(config, [StoreEntry.model_validate(item) for item in raw])
