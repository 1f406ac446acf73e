"""The store browser in a real browser: Debian's Chromium, driven by Playwright, against a real store server
(``memsync store serve``) on SQLite and on PostgreSQL, over a store seeded with hostile content
(``support/browser.py``: script tags, ``javascript:`` links, event handlers in paths, a 60,000-character line,
a 100 kB memory, right-to-left overrides and control characters).

Every page visited is checked for the canary: ``window.__pwned`` stays undefined (no text from a store ever
ran as script), no dialog opened, the page raised no Content-Security-Policy violation of its own, and its
answer carried the policy and the other headers. The run writes screenshots of the main pages into
``build/screenshots/<backend>/`` (git-ignored; docs/images/store-ui/ holds the ones the docs show).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Response, sync_playwright

from conftest import REPO_ROOT, RunningStoreServer
from memsync.server.ui.security import CONTENT_SECURITY_POLICY
from support.browser import (
    API_HEADERS,
    MISSING,
    POISON,
    STORE_NAME,
    HostileStore,
    find_chromium,
    seed,
)

pytestmark = [pytest.mark.browser, pytest.mark.both_backends]


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    path = find_chromium()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{MISSING} (CI must run the browser tests)")
        pytest.skip(MISSING)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def hostile(store_server: RunningStoreServer) -> HostileStore:
    return seed(store_server.url, store_server.admin_key)


@dataclass
class Watched:
    """A page, and everything it did that a test must see: dialogs, console errors, document answers."""

    page: Page
    base: str
    shots: Path
    dialogs: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    documents: list[Response] = field(default_factory=list)

    def go(self, path: str) -> None:
        self.page.goto(self.base + path)
        self.check()

    def check(self) -> None:
        """Nothing from the store ran, and the page is what the server sent, under its policy."""
        self.page.wait_for_load_state("load")
        assert self.page.evaluate("typeof window.__pwned") == "undefined", self.page.evaluate(
            "window.__pwned"
        )
        assert self.dialogs == []
        assert [e for e in self.console_errors if "Content Security Policy" in e] == []
        for response in self.documents:
            headers = response.headers
            assert headers.get("content-security-policy") == CONTENT_SECURITY_POLICY, response.url
            assert headers.get("x-frame-options") == "DENY"
            assert headers.get("referrer-policy") == "no-referrer"

    def shot(self, name: str, *, full_page: bool = False) -> None:
        self.shots.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=full_page)

    def sign_in(self, key: str) -> None:
        self.go("/ui/")
        assert "/ui/signin" in self.page.url
        self.page.fill("#key", key)
        self.submit("form.signin button[type=submit]")

    def submit(self, selector: str) -> None:
        """Click ``selector`` and wait for the page it leads to."""
        with self.page.expect_navigation():
            self.page.click(selector)
        self.check()


@pytest.fixture
def watched(chromium: Browser, store_server: RunningStoreServer) -> Iterator[Watched]:
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    w = Watched(page, store_server.url, REPO_ROOT / "build" / "screenshots" / store_server.backend)
    page.on("dialog", lambda d: (w.dialogs.append(d.message), d.dismiss()))
    page.on("console", lambda m: w.console_errors.append(m.text) if m.type == "error" else None)
    page.on("response", lambda r: w.documents.append(r) if r.request.resource_type == "document" else None)
    try:
        yield w
    finally:
        context.close()


def version(store_server: RunningStoreServer, store_id: str, version_id: str) -> dict[str, Any]:
    resp = httpx.get(
        f"{store_server.url}/v1/memory_stores/{store_id}/memory_versions/{version_id}",
        headers={**API_HEADERS, "x-api-key": store_server.admin_key},
    )
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def test_an_auditor_finds_compares_and_redacts_a_poisoned_version(
    watched: Watched, hostile: HostileStore, store_server: RunningStoreServer
) -> None:
    w, page, sid = watched, watched.page, hostile.store_id
    w.go("/ui/signin")
    w.shot("signin")
    w.sign_in(store_server.admin_key)
    assert page.url.endswith("/ui/")
    row = page.locator("tr", has=page.locator(f"a[href='/ui/stores/{sid}']"))
    assert STORE_NAME in row.inner_text()  # the name is text, not markup
    w.shot("stores")

    # browse: the folders, one with HTML in its memories' names
    w.submit(f"a[href='/ui/stores/{sid}']")
    folders = [t.split("\t")[0] for t in page.locator("tr.folder").all_inner_texts()]
    assert folders == ["html/", "notes/"]
    w.shot("store")
    w.submit("tr.folder >> text=html/")
    names = page.locator("td.path").all_inner_texts()
    assert "<img src=x onerror=window.__pwned='path'>.md" in names
    for path, memory_id in hostile.memories.items():
        if path.startswith("/html/"):
            w.go(f"/ui/stores/{sid}/memories/{memory_id}")
            assert page.locator("h1").inner_text() == path

    # search by path prefix, then by content
    w.go(f"/ui/stores/{sid}")
    page.fill("#path", "/notes/de")
    w.submit("form.search button")
    assert page.locator("td.path").all_inner_texts() == ["/notes/deep/down/leaf.md"]
    page.fill("#path", "")
    page.fill("#q", "IGNORE PREVIOUS")
    w.submit("form.search button")
    assert page.locator("td.path").all_inner_texts() == ["/prefs.md"]
    w.shot("search")

    # the memory and its versions; the diff of the clean version and the poisoned one
    w.submit("td.path a")
    assert page.url.endswith(f"/memories/{hostile.poisoned_id}")
    clean, poisoned = hostile.versions
    assert POISON in page.locator("pre.content").inner_text()
    assert page.locator(f"input[name=from][value={clean}]").is_checked()  # the last change, by default
    assert page.locator(f"input[name=to][value={poisoned}]").is_checked()
    w.shot("memory")
    w.submit("text=Compare the selected versions")
    assert [t.strip() for t in page.locator("tr.add pre").all_inner_texts()] == [f"+ {POISON}"]
    w.shot("diff")

    # the poisoned version is the memory's current one: not offered for redaction until it is replaced
    w.go(f"/ui/stores/{sid}/versions/{poisoned}")
    assert page.locator("form.redact").count() == 0
    assert "current version of a live memory" in page.locator("main").inner_text()
    fixed = httpx.post(
        f"{store_server.url}/v1/memory_stores/{sid}/memories/{hostile.poisoned_id}",
        json={"content": "likes tea\n"},
        headers={**API_HEADERS, "x-api-key": store_server.admin_key},
    )
    assert fixed.status_code == 200, fixed.text
    cleaned = fixed.json()["memory_version_id"]

    # redact the poisoned version: a wrong confirmation redacts nothing, the store's name does
    w.go(f"/ui/stores/{sid}/versions/{poisoned}")
    assert POISON in page.locator("pre.content").inner_text()
    assert page.locator("form.redact button").is_disabled()  # ui.js: until the name is typed
    page.fill("#confirm", "Audit")
    assert page.locator("form.redact button").is_disabled()
    page.eval_on_selector("form.redact button", "b => b.disabled = false")  # a browser without the script
    w.submit("form.redact button")
    assert "Nothing was redacted" in page.locator(".error").inner_text()
    assert version(store_server, sid, poisoned)["redacted_at"] is None
    page.fill("#confirm", STORE_NAME)
    w.shot("version-redact")
    w.submit("form.redact button")
    assert page.locator(".done").inner_text().startswith("Redacted")
    redacted = version(store_server, sid, poisoned)
    assert redacted["content"] is None and redacted["redacted_at"] is not None
    assert redacted["redacted_by"]["type"] == "api_actor"  # recorded as the CLI's redact records it
    admin_key_id = redacted["redacted_by"]["api_key_id"]
    assert admin_key_id.startswith("apikey_") and admin_key_id in page.locator("dl.facts").inner_text()
    # the current version is not offered for redaction
    w.go(f"/ui/stores/{sid}/versions/{cleaned}")
    assert page.locator("form.redact").count() == 0
    assert "current version of a live memory" in page.locator("main").inner_text()


def test_hostile_content_is_shown_as_text(
    watched: Watched, hostile: HostileStore, store_server: RunningStoreServer
) -> None:
    w, page, sid = watched, watched.page, hostile.store_id
    w.sign_in(store_server.admin_key)
    w.go(f"/ui/stores/{sid}/memories/{hostile.memories['/links.md']}")
    assert "javascript:window.__pwned='link'" in page.locator("pre.content").inner_text()
    assert page.locator("main a[href^='javascript']").count() == 0
    assert page.locator("main iframe, main svg, main img").count() == 0
    w.go(f"/ui/stores/{sid}/memories/{hostile.memories['/rtl.md']}")
    marks = page.locator("pre.content .ctl").all_inner_texts()
    assert marks == ["U+202E", "U+0007", "U+001B", "U+0000"]
    assert "שלום עולם مرحبا" in page.locator("pre.content").inner_text()
    w.shot("hostile-rtl")
    w.go(f"/ui/stores/{sid}/memories/{hostile.memories['/huge-line.md']}")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, "a 60,000-character line must wrap, not widen the page"
    w.go(f"/ui/stores/{sid}/memories/{hostile.memories['/big.md']}")
    assert len(page.locator("pre.content").inner_text().encode()) >= 102_000
    w.go(f"/ui/stores/{sid}/deleted")
    assert page.locator("td.path").all_inner_texts() == ["/trash/<i>gone</i>.md"]
    w.shot("deleted")
    w.submit(f"a[href='/ui/stores/{sid}/memories/{hostile.deleted_id}']")
    assert "This memory was deleted" in page.locator("main").inner_text()
    w.go(f"/ui/stores/{sid}/writers")
    assert hostile.session_id in page.locator("table").inner_text()
    w.shot("writers")
    w.submit(f"text={hostile.session_id}")
    assert page.locator("td.path").all_inner_texts() == ["/from-agent.md"]
    w.go("/docs")
    heading = page.get_by_role("heading", name="POST /v1/memory_stores/{store_id}/memories", exact=True)
    assert heading.count() == 1
    assert page.locator("#schema-MemoryVersion").count() == 1
    w.shot("docs")


def test_the_policy_blocks_a_script_that_slipped_into_a_page(
    watched: Watched, hostile: HostileStore, store_server: RunningStoreServer
) -> None:
    """Were a template ever to leave a script unescaped, the Content-Security-Policy would still stop it: a
    page's answer rewritten to carry one runs nothing."""
    w, page = watched, watched.page
    w.sign_in(store_server.admin_key)

    def inject(route: Any) -> None:
        response = route.fetch()
        body = response.text().replace("</main>", "<script>window.__pwned='inline'</script></main>")
        route.fulfill(response=response, body=body)

    page.route(re.compile(r".*/ui/stores/[^/]+$"), inject)
    page.goto(f"{w.base}/ui/stores/{hostile.store_id}")
    assert "window.__pwned='inline'" in page.content()
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert any("Content Security Policy" in e for e in w.console_errors)


def test_a_viewer_key_reads_but_cannot_redact(
    watched: Watched, hostile: HostileStore, store_server: RunningStoreServer
) -> None:
    w, page, sid = watched, watched.page, hostile.store_id
    w.sign_in(hostile.viewer_key)
    assert "a viewer key" in page.locator("header").inner_text()
    target = version_of_deleted(store_server, hostile)
    w.go(f"/ui/stores/{sid}/versions/{target}")
    assert "<script>window.__pwned='deleted'</script>" in page.locator("pre.content").inner_text()
    assert page.locator("form.redact").count() == 0
    assert "redacting needs an admin key" in page.locator("main").inner_text()
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    forged = page.request.post(
        f"{w.base}/ui/stores/{sid}/versions/{target}/redact",
        form={"csrf": csrf or "", "confirm": STORE_NAME},
        headers={"origin": w.base},
    )
    assert forged.status == 403
    assert version(store_server, sid, target)["redacted_at"] is None
    # nor through the API
    api = httpx.post(
        f"{store_server.url}/v1/memory_stores/{sid}/memory_versions/{target}/redact",
        headers={**API_HEADERS, "x-api-key": hostile.viewer_key},
    )
    assert api.status_code == 403 and "viewer key" in api.json()["error"]["message"]


def test_the_keyboard_reaches_every_action(
    watched: Watched, hostile: HostileStore, store_server: RunningStoreServer
) -> None:
    w, page, sid = watched, watched.page, hostile.store_id
    w.sign_in(store_server.admin_key)
    for path in (
        "/ui/",
        f"/ui/stores/{sid}",
        f"/ui/stores/{sid}/memories/{hostile.poisoned_id}",
        f"/ui/stores/{sid}/writers",
    ):
        w.go(path)
        assert tab_stops(page) >= actions(page), path
    # the redaction form, by keyboard alone: type the name, tab to the button, press Enter
    target = version_of_deleted(store_server, hostile)
    w.go(f"/ui/stores/{sid}/versions/{target}")
    focus(page, "#confirm")
    page.keyboard.type(STORE_NAME)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Redact version"
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*redacted=1$"))
    w.check()
    assert version(store_server, sid, target)["redacted_at"] is not None


def version_of_deleted(store_server: RunningStoreServer, hostile: HostileStore) -> str:
    """The creation version of the deleted memory (not a live memory's current version: redactable)."""
    resp = httpx.get(
        f"{store_server.url}/v1/memory_stores/{hostile.store_id}/memory_versions",
        params={"memory_id": hostile.deleted_id, "operation": "created"},
        headers={**API_HEADERS, "x-api-key": store_server.admin_key},
    )
    created: str = resp.json()["data"][0]["id"]
    return created


_DESCRIBE = """e => e.tagName + ' ' + (e.type === 'radio' ? 'radio ' + e.name
    : (e.getAttribute('href') || e.id || e.name || e.textContent.trim()))"""


def actions(page: Page) -> set[str]:
    """Every link, button and field of the page (a radio group counts once: one stop, arrows move in it)."""
    found: list[str] = page.eval_on_selector_all(
        "a[href], button:not([disabled]), input:not([type=hidden]), select, textarea",
        f"all => all.map({_DESCRIBE})",
    )
    return set(found)


def tab_stops(page: Page) -> set[str]:
    """Where Tab takes the focus, from the top of the page round to the start again."""
    page.evaluate("document.activeElement && document.activeElement.blur()")
    seen: list[str] = []
    for _ in range(500):
        page.keyboard.press("Tab")
        here = page.evaluate(f"({_DESCRIBE})(document.activeElement)")
        if seen and here == seen[0]:
            break
        seen.append(here)
    return set(seen)


def focus(page: Page, selector: str) -> None:
    """Tab until ``selector`` has the focus (it must be reachable by keyboard)."""
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for _ in range(200):
        page.keyboard.press("Tab")
        if page.evaluate(f"document.activeElement === document.querySelector({selector!r})"):
            return
    raise AssertionError(f"{selector} cannot be reached with Tab")
