"""The store browser's pages for reading (every one a GET that works without JavaScript): the stores, a
store's folders and search, a memory with its versions, one version, the diff of two versions, a store's
deleted memories, its writers in a time window and its change log.

Each page reads through ``StoreService`` as the signed-in key (an admin key or a viewer key), so it sees what
that key may see through the API, and no more.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Query
from starlette.responses import HTMLResponse, RedirectResponse

from memsync.server.errors import ApiError, invalid
from memsync.server.ids import format_ts
from memsync.server.stores import rules
from memsync.server.stores.service import StoreService
from memsync.server.ui.deps import PageRoute, SignedInBrowser
from memsync.server.ui.render import diff_lines, page
from memsync.server.ui.signin import SignedIn

WINDOW_DEFAULT = timedelta(days=1)
VERSIONS_PER_PAGE = 100
_NO_FILTERS: dict[str, str | None] = {
    "memory_id": None,
    "operation": None,
    "session_id": None,
    "api_key_id": None,
    "service_account_id": None,
    "created_gte": None,
    "created_lte": None,
}


def breadcrumbs(prefix: str) -> list[tuple[str, str]]:
    """``/a/b/`` -> [("/", "/"), ("a", "/a/"), ("b", "/a/b/")]: each folder's name and prefix."""
    crumbs = [("/", "/")]
    parts = [p for p in prefix.split("/") if p]
    for i, part in enumerate(parts):
        crumbs.append((part, "/" + "/".join(parts[: i + 1]) + "/"))
    return crumbs


def folder_name(prefix: str) -> str:
    """The last segment of a folder prefix (``/a/b/`` -> ``b/``)."""
    return prefix.rstrip("/").rsplit("/", 1)[-1] + "/"


def router(service: StoreService) -> APIRouter:
    router = APIRouter(route_class=PageRoute, include_in_schema=False)

    def base(signed: SignedIn, title: str, **extra: Any) -> dict[str, Any]:
        return {"signed": signed, "title": title, **extra}

    def store_of(signed: SignedIn, store_id: str) -> dict[str, Any]:
        return service.get_store(signed.principal, store_id)

    @router.get("/ui")
    def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=308)

    @router.get("/ui/")
    def stores(signed: SignedInBrowser, page_: str | None = Query(None, alias="page")) -> HTMLResponse:
        listing = service.store_summaries(signed.principal, page_)
        return page("stores.html", base(signed, "Memory stores", listing=listing))

    @router.get("/ui/stores/{store_id}")
    def store(
        *,
        signed: SignedInBrowser,
        store_id: str,
        prefix: str = "/",
        path: str = "",
        q: str = "",
        after: str = "",
        page_: str | None = Query(None, alias="page"),
    ) -> HTMLResponse:
        found = store_of(signed, store_id)
        context = base(signed, found["name"], store=found, prefix=prefix, path=path, q=q)
        if path or q:
            searched = path if path.startswith("/") else "/" + path
            result = service.search_memories(
                signed.principal, store_id, prefix=searched, needle=q, after=after
            )
            return page("search.html", {**context, "result": result})
        listed, _ = service.list_memories(
            signed.principal,
            store_id,
            view="basic",
            limit=100,
            page=page_,
            path_prefix=prefix,
            depth=1,
        )
        assert listed is not None
        context.update(listed=listed, crumbs=breadcrumbs(rules.validate_list_prefix(prefix)))
        return page("store.html", {**context, "folder_name": folder_name})

    @router.get("/ui/stores/{store_id}/memories/{memory_id}")
    def memory(
        signed: SignedInBrowser, store_id: str, memory_id: str, page_: str | None = Query(None, alias="page")
    ) -> HTMLResponse:
        found = store_of(signed, store_id)
        try:
            live: dict[str, Any] | None = service.get_memory(signed.principal, store_id, memory_id, "full")
        except ApiError as exc:
            if exc.status != 404:
                raise
            live = None
        versions = service.list_versions(
            signed.principal,
            store_id,
            view="basic",
            limit=VERSIONS_PER_PAGE,
            page=page_,
            filters={**_NO_FILTERS, "memory_id": memory_id},
        )
        if live is None and not versions["data"]:
            raise ApiError(
                404, "not_found_error", f"memory {memory_id!r} not found in memory store {store_id}"
            )
        title = (live or versions["data"][0])["path"] or memory_id
        return page(
            "memory.html",
            base(signed, title, store=found, memory_id=memory_id, live=live, versions=versions),
        )

    @router.get("/ui/stores/{store_id}/versions/{version_id}")
    def version(signed: SignedInBrowser, store_id: str, version_id: str, redacted: int = 0) -> HTMLResponse:
        found = store_of(signed, store_id)
        shown = service.get_version(signed.principal, store_id, version_id, "full")
        return page("version.html", version_context(service, signed, found, shown, redacted=bool(redacted)))

    @router.get("/ui/stores/{store_id}/memories/{memory_id}/diff")
    def diff(
        signed: SignedInBrowser,
        store_id: str,
        memory_id: str,
        from_: str = Query(alias="from"),
        to: str = Query(),
    ) -> HTMLResponse:
        found = store_of(signed, store_id)
        old = service.get_version(signed.principal, store_id, from_, "full")
        new = service.get_version(signed.principal, store_id, to, "full")
        if memory_id not in (old["memory_id"], new["memory_id"]):
            raise invalid("the versions compared must be versions of this memory")
        lines = None
        if old["content"] is not None and new["content"] is not None:
            lines = diff_lines(old["content"], new["content"])
        return page(
            "diff.html",
            base(signed, "Diff", store=found, memory_id=memory_id, old=old, new=new, lines=lines),
        )

    @router.get("/ui/stores/{store_id}/deleted")
    def deleted(
        signed: SignedInBrowser, store_id: str, page_: str | None = Query(None, alias="page")
    ) -> HTMLResponse:
        found = store_of(signed, store_id)
        listing = service.deleted_memories(signed.principal, store_id, page_)
        return page("deleted.html", base(signed, "Deleted memories", store=found, listing=listing))

    @router.get("/ui/stores/{store_id}/writers")
    def writers(signed: SignedInBrowser, store_id: str, since: str = "", until: str = "") -> HTMLResponse:
        found = store_of(signed, store_id)
        gte, lte = window(since, until)
        rows = service.writers(signed.principal, store_id, gte=gte, lte=lte)
        return page(
            "writers.html",
            base(signed, "Writers", store=found, rows=rows, since=gte[:16], until=lte[:16]),
        )

    @router.get("/ui/stores/{store_id}/changes")
    def changes(
        *,
        signed: SignedInBrowser,
        store_id: str,
        session_id: str | None = None,
        api_key_id: str | None = None,
        since: str = "",
        until: str = "",
        page_: str | None = Query(None, alias="page"),
    ) -> HTMLResponse:
        found = store_of(signed, store_id)
        filters = {**_NO_FILTERS, "session_id": session_id or None, "api_key_id": api_key_id or None}
        if since or until:
            filters["created_gte"], filters["created_lte"] = window(since, until)
        versions = service.list_versions(
            signed.principal, store_id, view="basic", limit=VERSIONS_PER_PAGE, page=page_, filters=filters
        )
        query = {k: v for k, v in (("session_id", session_id), ("api_key_id", api_key_id)) if v}
        query.update({k: v for k, v in (("since", since), ("until", until)) if v})
        return page(
            "changes.html",
            base(signed, "Changes", store=found, versions=versions, filters=query),
        )

    return router


def version_context(
    service: StoreService,
    signed: SignedIn,
    store: dict[str, Any],
    shown: dict[str, Any],
    *,
    redacted: bool = False,
    error: str | None = None,
) -> dict[str, Any]:
    """What the version page shows, the redaction form's state included: whether the version may be
    redacted (not yet, and not the current version of a live memory) and by this key."""
    head = False
    if shown["redacted_at"] is None:
        try:
            live = service.get_memory(signed.principal, store["id"], shown["memory_id"], "basic")
            head = live["memory_version_id"] == shown["id"]
        except ApiError as exc:
            if exc.status != 404:
                raise
    return {
        "signed": signed,
        "title": shown["path"] or shown["id"],
        "store": store,
        "version": shown,
        "is_head": head,
        "redactable": shown["redacted_at"] is None and not head,
        "just_redacted": redacted,
        "error": error,
    }


def window(since: str, until: str) -> tuple[str, str]:
    """A time window from two form values (RFC 3339 or a ``datetime-local`` value, read as UTC); the last
    ``WINDOW_DEFAULT`` up to now by default."""
    now = datetime.now(UTC)
    if len(until) == len("2026-01-31T12:00"):
        until += ":59.999999"  # a minute (what a datetime-local field sends) ends at its last microsecond
    lte = rules.parse_timestamp_filter(until, "until") if until else format_ts(now)
    gte = rules.parse_timestamp_filter(since, "since") if since else format_ts(now - WINDOW_DEFAULT)
    assert gte is not None and lte is not None
    if gte > lte:
        raise invalid("since must come before until")
    return gte, lte
