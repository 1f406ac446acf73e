"""A namespace the operator may no longer watch is a logged and reported condition, never an exit.

With ``rbac.scope: namespaced`` the operator's grants in a namespace are a Role and a RoleBinding in that
namespace, and deleting the namespace deletes them while its sessions still end: kopf's watch of that
namespace then re-lists, gets 403 Forbidden, and (after its own retries) ends the watch with the error,
which stops the whole operator, in a crash loop as long as the namespace stays in its ``--namespace`` list.
Every other namespace would lose its operator for one namespace's deletion.

``tolerate_forbidden_watches`` wraps kopf's per-namespace watch stream (one stream per resource and
namespace; a cluster-wide stream too): a 403 there is logged once as an error, shown by the gauge
``memsync_operator_watch_forbidden{namespace,resource}``, and retried every ``RETRY_SECONDS`` while the other
namespaces are served as before; the first event after access returns clears it. A namespace forbidden
before its first listing counts as listed (empty): kopf handles no object of any namespace until every
watched one is listed, so one namespace would otherwise hold up the others. kopf's request-level
retries of the 403 (its ``networking.error_backoffs``) run first. kopf offers no setting for this, so the
wrapper replaces the stream function of kopf's watching module (``kopf._cogs.clients.watching``, the pinned
version's; ``tests/unit/test_forbidden.py`` fails if that function is gone or renamed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from kopf._cogs.clients import errors, watching

from memsync.controller import metrics

logger = logging.getLogger(__name__)

RETRY_SECONDS: Final = 30.0
_MARK: Final = "_memsync_tolerates_forbidden"
#: (namespace, resource) of the watches forbidden now.
FORBIDDEN: set[tuple[str, str]] = set()


def _where(namespace: Any) -> str:
    return str(namespace) if namespace else "(cluster-wide)"


def tolerant(stream: Callable[..., AsyncIterator[Any]], retry_s: float | None = None) -> Callable[..., Any]:
    """``stream`` (kopf's ``continuous_watch``) with a 403 turned into a logged, reported pause of
    ``retry_s`` (default ``RETRY_SECONDS``)."""

    async def continuous_watch(**kwargs: Any) -> AsyncIterator[Any]:
        where = _where(kwargs.get("namespace"))
        resource = kwargs.get("resource")
        plural = str(getattr(resource, "plural", resource))
        key = (where, plural)
        gauge = metrics.WATCH_FORBIDDEN.labels(namespace=where, resource=plural)
        listed = False
        try:
            async for event in stream(**kwargs):
                listed = listed or event is watching.Bookmark.LISTED
                if key in FORBIDDEN:  # access is back
                    FORBIDDEN.discard(key)
                    gauge.set(0)
                    logger.info("watching is allowed again", extra={"namespace": where, "resource": plural})
                yield event
        except errors.APIForbiddenError as exc:
            if key not in FORBIDDEN:
                logger.error(
                    "the API forbids watching this resource in this namespace (its RoleBinding is gone: the "
                    "namespace is being deleted, or RBAC changed); the operator keeps serving the others and "
                    "retries",
                    extra={"namespace": where, "resource": plural, "error": str(exc)},
                )
            FORBIDDEN.add(key)
            gauge.set(1)
            if not listed:
                yield watching.Bookmark.LISTED  # nothing of it can be known: it holds up no other namespace
            await asyncio.sleep(RETRY_SECONDS if retry_s is None else retry_s)

    setattr(continuous_watch, _MARK, True)
    return continuous_watch


def tolerate_forbidden_watches() -> None:
    """Install ``tolerant`` in kopf's watching module (once per process)."""
    if not getattr(watching.continuous_watch, _MARK, False):
        watching.continuous_watch = tolerant(watching.continuous_watch)
