"""The store browser: a read-mostly web UI of the store server (``/ui/``), for the people who audit what
agents remember, and the API reference (``/docs``, ``/openapi.json``), behind the same sign-in.

- ``signin.py``: signing in with an admin key or a viewer key; the session cookie; CSRF tokens;
- ``security.py``: the Content-Security-Policy and the other headers, cookie and origin checks;
- ``render.py``: the Jinja2 templates (``templates/``) and the helpers they use (escaping hidden characters,
  the diff of two versions);
- ``deps.py``: what each page takes from a request; ``pages.py``: the pages that read; ``actions.py``: the
  forms (sign in, sign out, redact); ``reference.py``: the API reference;
- ``static/``: the stylesheet and the one small script, served from this origin.

Every page reads through ``StoreService`` as the signed-in key, so the browser shows what that key may read
through the API and can change only what it may change (a redaction, with an admin key). docs/store-ui.md
describes it for its users.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from memsync.server.access import AccessService
from memsync.server.stores.service import StoreService
from memsync.server.ui import actions, pages, reference
from memsync.server.ui.security import BrowserHeadersMiddleware
from memsync.server.ui.signin import BrowserSessions

__all__ = ["BrowserHeadersMiddleware", "install"]


def install(app: FastAPI, service: StoreService, access: AccessService) -> None:
    """Serve the browser, its assets and the API reference from ``app`` (its headers are added by
    ``BrowserHeadersMiddleware``, which ``create_app`` puts outermost)."""
    app.state.browser_sessions = BrowserSessions(access)
    for router in (
        pages.router(service),
        actions.router(service),
        reference.router(),
        reference.document_router(),
    ):
        app.include_router(router)
    app.mount("/ui/static", StaticFiles(packages=[("memsync.server.ui", "static")]), name="ui-static")
