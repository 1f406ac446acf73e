"""The store browser's pure parts: hidden characters made visible, the diff, the search's bounds, where a
sign-in may send the browser, which requests count as the browser's own, when the cookie is Secure."""

from __future__ import annotations

import pytest
from markupsafe import Markup

from memsync.server.stores.rules import text_upper_bound
from memsync.server.ui.deps import safe_next
from memsync.server.ui.pages import breadcrumbs, folder_name, window
from memsync.server.ui.render import DiffLine, diff_lines, visible
from memsync.server.ui.security import is_browser_path, same_origin, served_over_tls
from memsync.server.ui.signin import csrf_matches, csrf_token


def test_visible_escapes_and_marks_what_would_hide() -> None:
    shown = visible("<script>x</script> a\u202eb\x00c\x1b\u200bd\te\nf")
    assert isinstance(shown, Markup)
    assert str(shown) == (
        "&lt;script&gt;x&lt;/script&gt; a"
        '<span class="ctl" title="an invisible or direction-changing character">U+202E</span>b'
        '<span class="ctl" title="an invisible or direction-changing character">U+0000</span>c'
        '<span class="ctl" title="an invisible or direction-changing character">U+001B</span>'
        '<span class="ctl" title="an invisible or direction-changing character">U+200B</span>d\te\nf'
    )
    assert visible(None) == Markup("")
    assert str(visible("שלום \"'&")) == "שלום &#34;&#39;&amp;"  # right-to-left text itself stays


def test_diff_lines_show_each_change_with_its_context() -> None:
    old = "\n".join(f"line {i}" for i in range(1, 21))
    new = old.replace("line 3", "line three").replace("line 18\n", "")
    lines = diff_lines(old, new, context=1)
    assert lines == [
        DiffLine("same", 2, 2, "line 2"),
        DiffLine("del", 3, None, "line 3"),
        DiffLine("add", None, 3, "line three"),
        DiffLine("same", 4, 4, "line 4"),
        DiffLine("gap", None, None, ""),
        DiffLine("same", 17, 17, "line 17"),
        DiffLine("del", 18, None, "line 18"),
        DiffLine("same", 19, 18, "line 19"),
    ]
    assert diff_lines("same\n", "same\n") == []


@pytest.mark.parametrize(
    ("prefix", "bound"),
    [
        ("/a", "/b"),
        ("/notes/", "/notes0"),
        ("/x\ud7ff"[:2] + "\ud7ff", "/x\ue000"),
        ("/é", "/ê"),
        ("/\U0010ffff", "0"),
    ],
)
def test_text_upper_bound_is_just_above_every_text_with_the_prefix(prefix: str, bound: str) -> None:
    assert text_upper_bound(prefix) == bound
    for text in (prefix, prefix + "z", prefix + "\U0010ffff" * 3):
        assert text.encode("utf-8", "surrogatepass") < bound.encode("utf-8", "surrogatepass")


def test_text_upper_bound_of_the_last_code_point_alone() -> None:
    bound = text_upper_bound("\U0010ffff")
    assert bound > "\U0010ffff" * 300 and bound.startswith("\U0010ffff")


@pytest.mark.parametrize(
    ("value", "target"),
    [
        ("/ui/stores/x?prefix=%2F", "/ui/stores/x?prefix=%2F"),
        ("https://evil.example/ui/", "/ui/"),
        ("//evil.example/ui/", "/ui/"),
        ("/ui/\\evil", "/ui/"),
        ("/docs", "/ui/"),
        (None, "/ui/"),
    ],
)
def test_signing_in_returns_only_to_a_page_of_the_browser(value: str | None, target: str) -> None:
    assert safe_next(value) == target


def test_a_post_must_come_from_the_servers_own_pages() -> None:
    host = "store.example:8700"
    assert same_origin("http://store.example:8700", None, host, "http")
    assert same_origin("https://store.example:8700", None, host, "http")  # TLS ended in front of it
    assert not same_origin("http://evil.example", "same-origin", host, "http")
    assert same_origin("null", "same-origin", host, "http")  # Referrer-Policy: no-referrer
    assert not same_origin("null", "cross-site", host, "http")
    assert not same_origin(None, "same-site", host, "http")
    assert same_origin(None, None, host, "http")  # not a browser: the CSRF token decides


def test_the_cookie_is_secure_over_tls_or_behind_a_tls_proxy() -> None:
    assert served_over_tls("https", None, "http://x")
    assert served_over_tls("http", "https", "http://x")
    assert served_over_tls("http", None, "https://store.example")
    assert not served_over_tls("http", "http", "http://127.0.0.1:8700")


def test_csrf_tokens_belong_to_their_session() -> None:
    token = csrf_token("session-a")
    assert csrf_matches("session-a", token)
    assert not csrf_matches("session-b", token)
    assert not csrf_matches("session-a", None)


def test_browser_paths() -> None:
    assert all(is_browser_path(p) for p in ("/ui", "/ui/", "/ui/static/ui.css", "/docs", "/openapi.json"))
    assert not any(is_browser_path(p) for p in ("/uix", "/v1/memory_stores", "/docsx", "/healthz"))


def test_folders_and_windows() -> None:
    assert breadcrumbs("/a/b/") == [("/", "/"), ("a", "/a/"), ("b", "/a/b/")]
    assert folder_name("/a/b/") == "b/"
    assert window("2026-01-01T00:00", "2026-01-02T10:30") == (
        "2026-01-01T00:00:00.000000Z",
        "2026-01-02T10:30:59.999999Z",
    )
    with pytest.raises(Exception, match="since must come before until"):
        window("2026-01-03T00:00", "2026-01-02T00:00")
