"""The store browser's forms: sign in, sign out, and redact a version.

Redacting erases a version's content for good, so it asks for the store's name typed out in full (the
confirmation), is offered only to an admin key's session, and goes through the same service call as the
API's ``POST .../memory_versions/{id}/redact`` (and so ``memsync store redact``): the version records the
admin key as its ``redacted_by``. A viewer key's session is refused by the service itself, whatever it posts.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from memsync.server.errors import ApiError, forbidden
from memsync.server.stores.service import StoreService
from memsync.server.ui.deps import Form, PageRoute, SignedInBrowser, safe_next, sessions_of, signed_in_or_none
from memsync.server.ui.pages import version_context
from memsync.server.ui.render import page
from memsync.server.ui.security import served_over_tls
from memsync.server.ui.signin import COOKIE, csrf_matches


def router(service: StoreService) -> APIRouter:
    router = APIRouter(route_class=PageRoute, include_in_schema=False)

    @router.get("/ui/signin")
    def sign_in_page(request: Request, next: str | None = None) -> Response:
        if signed_in_or_none(request) is not None:
            return RedirectResponse(safe_next(next), status_code=303)
        return page(
            "signin.html", {"signed": None, "title": "Sign in", "next": safe_next(next), "error": None}
        )

    @router.post("/ui/signin")
    def sign_in(request: Request, form: Form) -> Response:
        back_to = safe_next(form.get("next"))
        try:
            token, signed = sessions_of(request).sign_in(form.get("key", ""))
        except ApiError as exc:
            if exc.status != 401:
                raise
            message = "That is not a current admin key or viewer key of this server."
            context = {"signed": None, "title": "Sign in", "next": back_to, "error": message}
            return page("signin.html", context, status=401)
        response = RedirectResponse(back_to, status_code=303)
        response.set_cookie(
            COOKIE,
            token,
            max_age=sessions_of(request).seconds_left(signed),
            path="/",
            secure=served_over_tls(
                request.url.scheme,
                request.headers.get("x-forwarded-proto"),
                request.app.state.access.public_url,
            ),
            httponly=True,
            samesite="strict",
        )
        return response

    @router.post("/ui/signout")
    def sign_out(request: Request, signed: SignedInBrowser, form: Form) -> Response:
        token = request.cookies.get(COOKIE, "")
        if not csrf_matches(token, form.get("csrf")):
            raise forbidden("the form is stale or not from this browser's session: reload the page")
        sessions_of(request).sign_out(token)
        response = RedirectResponse("/ui/signin", status_code=303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    @router.post("/ui/stores/{store_id}/versions/{version_id}/redact")
    def redact(
        request: Request, signed: SignedInBrowser, form: Form, store_id: str, version_id: str
    ) -> Response:
        if not csrf_matches(request.cookies.get(COOKIE, ""), form.get("csrf")):
            raise forbidden("the form is stale or not from this browser's session: reload the page")
        store = service.get_store(signed.principal, store_id)
        if form.get("confirm", "") != store["name"]:
            shown = service.get_version(signed.principal, store_id, version_id, "full")
            error = "The confirmation must be the store's name, exactly as shown. Nothing was redacted."
            return page("version.html", version_context(service, signed, store, shown, error=error), 400)
        service.redact_version(signed.principal, store_id, version_id)  # 403 for a viewer key
        return RedirectResponse(f"/ui/stores/{store_id}/versions/{version_id}?redacted=1", status_code=303)

    return router
