"""Memories over real HTTP: create never overwrites, preconditions, no-op updates, renames, listings."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from conftest import StoreApi

pytestmark = pytest.mark.both_backends

SHA_OF = lambda text: hashlib.sha256(text.encode("utf-8")).hexdigest()  # noqa: E731


def _error(resp: Any, status: int, error_type: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["request_id"].startswith("req_")
    assert resp.headers["request-id"] == body["request_id"]
    error: dict[str, Any] = body["error"]
    return error


def _versions(api: StoreApi, store: str, **params: Any) -> list[dict[str, Any]]:
    resp = api.admin("GET", f"/v1/memory_stores/{store}/memory_versions", params={"limit": 100, **params})
    assert resp.status_code == 200, resp.text
    data: list[dict[str, Any]] = resp.json()["data"]
    return data


# --- create ---------------------------------------------------------------------------------------------


def test_create_hashes_exact_utf8_bytes_and_answers_basic(store_api: StoreApi) -> None:
    store = store_api.new_store()
    content = "Café\r\n\ufeff🎉 cafe\u0301"
    mem = store_api.create(store, "/notes/é.md", content)
    assert mem["type"] == "memory"
    assert mem["id"].startswith("mem_")
    assert mem["memory_store_id"] == store
    assert mem["path"] == "/notes/é.md"
    assert mem["content"] is None  # create defaults to view=basic
    assert mem["content_sha256"] == SHA_OF(content)
    assert mem["content_size_bytes"] == len(content.encode("utf-8"))
    assert mem["memory_version_id"].startswith("memver_")
    got = store_api.admin("GET", f"/v1/memory_stores/{store}/memories/{mem['id']}").json()
    assert got["content"] == content  # retrieve defaults to view=full, byte-exact
    basic = store_api.admin(
        "GET", f"/v1/memory_stores/{store}/memories/{mem['id']}", params={"view": "basic"}
    )
    assert basic.json()["content"] is None
    versions = _versions(store_api, store)
    assert [(v["operation"], v["id"]) for v in versions] == [("created", mem["memory_version_id"])]


def test_create_with_view_full_and_empty_or_null_content(store_api: StoreApi) -> None:
    store = store_api.new_store()
    resp = store_api.admin(
        "POST",
        f"/v1/memory_stores/{store}/memories",
        params={"view": "full"},
        json={"path": "/e", "content": ""},
    )
    assert resp.status_code == 200
    assert resp.json()["content"] == ""
    assert resp.json()["content_size_bytes"] == 0
    assert resp.json()["content_sha256"] == SHA_OF("")
    resp = store_api.admin(
        "POST", f"/v1/memory_stores/{store}/memories", json={"path": "/n", "content": None}
    )
    assert resp.status_code == 200
    assert resp.json()["content_sha256"] == SHA_OF("")


@pytest.mark.parametrize(
    ("existing", "requested", "blocker"),
    [
        ("/a/b", "/a/b", "/a/b"),  # occupied
        ("/a", "/a/b/c", "/a"),  # an ancestor exists
        ("/a/b/c", "/a", "/a/b/c"),  # a descendant exists
        ("/a/b/c", "/a/b", "/a/b/c"),
    ],
)
def test_create_never_overwrites_or_overlaps(
    store_api: StoreApi, existing: str, requested: str, blocker: str
) -> None:
    store = store_api.new_store()
    held = store_api.create(store, existing, "original")
    resp = store_api.admin(
        "POST", f"/v1/memory_stores/{store}/memories", json={"path": requested, "content": "intruder"}
    )
    err = _error(resp, 409, "memory_path_conflict_error")
    assert err["conflicting_memory_id"] == held["id"]
    assert err["conflicting_path"] == blocker
    assert requested in err["message"]
    assert resp.headers["x-should-retry"] == "false"
    assert store_api.paths(store) == [existing]
    got = store_api.admin("GET", f"/v1/memory_stores/{store}/memories/{held['id']}").json()
    assert got["content"] == "original"
    assert len(_versions(store_api, store)) == 1


def test_siblings_with_shared_name_prefix_do_not_conflict(store_api: StoreApi) -> None:
    store = store_api.new_store()
    for path in ["/a", "/a-b", "/a.b", "/ab", "/b/a", "/b/a-c/d"]:
        store_api.create(store, path, path)
    assert store_api.paths(store) == sorted(["/a", "/a-b", "/a.b", "/ab", "/b/a", "/b/a-c/d"])


def test_paths_are_case_sensitive(store_api: StoreApi) -> None:
    store = store_api.new_store()
    store_api.create(store, "/Notes", "1")
    store_api.create(store, "/notes", "2")
    assert store_api.paths(store) == ["/Notes", "/notes"]


# --- update ---------------------------------------------------------------------------------------------


def _update(api: StoreApi, store: str, mem_id: str, **body: Any) -> Any:
    return api.admin("POST", f"/v1/memory_stores/{store}/memories/{mem_id}", json=body)


def _precondition(sha: str) -> dict[str, str]:
    return {"type": "content_sha256", "content_sha256": sha}


def test_update_with_matching_precondition(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "one")
    resp = _update(store_api, store, mem["id"], content="two", precondition=_precondition(SHA_OF("one")))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["content"] is None  # update defaults to view=basic
    assert body["content_sha256"] == SHA_OF("two")
    assert body["memory_version_id"] != mem["memory_version_id"]
    assert body["created_at"] == mem["created_at"]
    assert body["updated_at"] >= mem["updated_at"]
    versions = _versions(store_api, store, view="full")
    assert [v["operation"] for v in versions] == ["modified", "created"]
    assert versions[0]["id"] == body["memory_version_id"]
    assert versions[0]["content"] == "two"


def test_update_with_stale_precondition_is_refused_and_changes_nothing(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "one")
    resp = _update(store_api, store, mem["id"], content="two", precondition=_precondition(SHA_OF("zero")))
    err = _error(resp, 409, "memory_precondition_failed_error")
    assert SHA_OF("one") in err["message"]
    assert resp.headers["x-should-retry"] == "false"
    got = store_api.admin("GET", f"/v1/memory_stores/{store}/memories/{mem['id']}").json()
    assert got["content"] == "one"
    assert got["memory_version_id"] == mem["memory_version_id"]
    assert len(_versions(store_api, store)) == 1


def test_retried_update_that_already_landed_answers_200_without_a_version(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "one")
    first = _update(store_api, store, mem["id"], content="two", precondition=_precondition(SHA_OF("one")))
    assert first.status_code == 200
    # the same request again (its first response was "lost"): precondition is stale, state already matches
    again = _update(store_api, store, mem["id"], content="two", precondition=_precondition(SHA_OF("one")))
    assert again.status_code == 200, again.text
    assert again.json()["memory_version_id"] == first.json()["memory_version_id"]
    assert len(_versions(store_api, store)) == 2


def test_noop_update_writes_no_version(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "same")
    for body in ({"content": "same"}, {"path": "/a"}, {"content": "same", "path": "/a"}):
        resp = _update(store_api, store, mem["id"], **body)
        assert resp.status_code == 200
        assert resp.json()["memory_version_id"] == mem["memory_version_id"]
        assert resp.json()["updated_at"] == mem["updated_at"]
    assert len(_versions(store_api, store)) == 1


def test_update_needs_content_or_path(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "x")
    err = _error(_update(store_api, store, mem["id"]), 400, "invalid_request_error")
    assert "'content' or 'path'" in err["message"]
    err = _error(
        _update(store_api, store, mem["id"], precondition=_precondition(SHA_OF("x"))),
        400,
        "invalid_request_error",
    )
    assert "'content' or 'path'" in err["message"]


def test_update_unknown_memory_is_404(store_api: StoreApi) -> None:
    store = store_api.new_store()
    err = _error(_update(store_api, store, "mem_missing", content="x"), 404, "not_found_error")
    assert "mem_missing" in err["message"]


def test_rename_keeps_the_id_and_appends_a_version(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/old/name.md", "body")
    resp = _update(
        store_api, store, mem["id"], path="/new/name.md", precondition=_precondition(SHA_OF("body"))
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["id"] == mem["id"]
    assert resp.json()["path"] == "/new/name.md"
    assert resp.json()["content_sha256"] == SHA_OF("body")
    assert store_api.paths(store) == ["/new/name.md"]
    versions = _versions(store_api, store)
    assert [(v["operation"], v["path"]) for v in versions] == [
        ("modified", "/new/name.md"),
        ("created", "/old/name.md"),
    ]


def test_rename_and_edit_together(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "one")
    resp = _update(store_api, store, mem["id"], path="/b", content="two")
    assert resp.status_code == 200
    got = store_api.admin("GET", f"/v1/memory_stores/{store}/memories/{mem['id']}").json()
    assert (got["path"], got["content"]) == ("/b", "two")


@pytest.mark.parametrize(
    ("other", "target", "blocker"),
    [("/taken", "/taken", "/taken"), ("/dir/file", "/dir", "/dir/file"), ("/file", "/file/sub", "/file")],
)
def test_rename_never_overwrites_or_overlaps(
    store_api: StoreApi, other: str, target: str, blocker: str
) -> None:
    store = store_api.new_store()
    mover = store_api.create(store, "/mover", "m")
    held = store_api.create(store, other, "o")
    err = _error(_update(store_api, store, mover["id"], path=target), 409, "memory_path_conflict_error")
    assert err["conflicting_memory_id"] == held["id"]
    assert err["conflicting_path"] == blocker
    assert sorted(store_api.paths(store)) == sorted(["/mover", other])


def test_rename_into_its_own_subtree_is_allowed(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "x")
    assert _update(store_api, store, mem["id"], path="/a/b").status_code == 200
    assert _update(store_api, store, mem["id"], path="/a").status_code == 200
    assert store_api.paths(store) == ["/a"]


# --- delete ---------------------------------------------------------------------------------------------


def test_delete_with_expected_sha(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "x")
    url = f"/v1/memory_stores/{store}/memories/{mem['id']}"
    err = _error(
        store_api.admin("DELETE", url, params={"expected_content_sha256": SHA_OF("y")}),
        409,
        "memory_precondition_failed_error",
    )
    assert "nothing was deleted" in err["message"]
    assert store_api.paths(store) == ["/a"]
    resp = store_api.admin("DELETE", url, params={"expected_content_sha256": SHA_OF("x")})
    assert resp.status_code == 200
    assert resp.json() == {"type": "memory_deleted", "id": mem["id"]}
    assert store_api.paths(store) == []
    _error(store_api.admin("GET", url), 404, "not_found_error")
    _error(store_api.admin("DELETE", url), 404, "not_found_error")
    versions = _versions(store_api, store)
    assert [v["operation"] for v in versions] == ["deleted", "created"]
    deleted = versions[0]
    assert deleted["content_sha256"] is None
    assert deleted["content_size_bytes"] is None
    assert deleted["path"] == "/a"


def test_delete_unconditionally_and_path_is_free_again(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "x")
    assert store_api.admin("DELETE", f"/v1/memory_stores/{store}/memories/{mem['id']}").status_code == 200
    again = store_api.create(store, "/a", "y")
    assert again["id"] != mem["id"]


def test_delete_expected_sha_must_be_hex(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "x")
    resp = store_api.admin(
        "DELETE", f"/v1/memory_stores/{store}/memories/{mem['id']}", params={"expected_content_sha256": "XYZ"}
    )
    err = _error(resp, 400, "invalid_request_error")
    assert "expected_content_sha256" in err["message"]
    assert store_api.paths(store) == ["/a"]


# --- listings -------------------------------------------------------------------------------------------


def test_listing_order_views_and_prefixes(store_api: StoreApi) -> None:
    store = store_api.new_store()
    paths = ["/notes/todo.md", "/notes-archive/x", "/notes/deep/a.md", "/b", "/a", "/notes/deep/b/c.md", "/é"]
    for p in paths:
        store_api.create(store, p, f"content of {p}")
    everything = store_api.list_all(store)
    assert [m["path"] for m in everything] == sorted(paths)
    assert all(m["content"] is None for m in everything)
    full = store_api.list_all(store, view="full", limit=3)
    assert [m["content"] for m in full] == [f"content of {p}" for p in sorted(paths)]
    under = store_api.list_all(store, path_prefix="/notes/")
    assert [m["path"] for m in under] == ["/notes/deep/a.md", "/notes/deep/b/c.md", "/notes/todo.md"]
    top = store_api.list_all(store, depth=1)
    assert [(i["type"], i["path"]) for i in top] == [
        ("memory", "/a"),
        ("memory", "/b"),
        ("memory_prefix", "/notes-archive/"),
        ("memory_prefix", "/notes/"),
        ("memory", "/é"),
    ]
    inside = store_api.list_all(store, depth=1, path_prefix="/notes/")
    assert [(i["type"], i["path"]) for i in inside] == [
        ("memory_prefix", "/notes/deep/"),
        ("memory", "/notes/todo.md"),
    ]
    assert store_api.list_all(store, path_prefix="/nothing/") == []


def test_rollups_count_toward_limit_and_pages_do_not_repeat(store_api: StoreApi) -> None:
    store = store_api.new_store()
    for i in range(5):
        for j in range(3):
            store_api.create(store, f"/d{i}/f{j}", "x")
        store_api.create(store, f"/f{i}", "x")
    resp = store_api.admin("GET", f"/v1/memory_stores/{store}/memories", params={"depth": 1, "limit": 2})
    page = resp.json()
    assert [i["path"] for i in page["data"]] == ["/d0/", "/d1/"]
    assert page["next_page"].startswith("page_")
    walked = store_api.list_all(store, depth=1, limit=2)
    assert [i["path"] for i in walked] == [f"/d{i}/" for i in range(5)] + [f"/f{i}" for i in range(5)]


def test_full_view_caps_limit_at_20(store_api: StoreApi) -> None:
    store = store_api.new_store()
    for i in range(25):
        store_api.create(store, f"/m{i:02d}", "x")
    full = store_api.admin(
        "GET", f"/v1/memory_stores/{store}/memories", params={"view": "full", "limit": 100}
    )
    assert full.status_code == 200
    assert len(full.json()["data"]) == 20
    assert full.json()["next_page"]
    basic = store_api.admin("GET", f"/v1/memory_stores/{store}/memories", params={"limit": 100})
    assert len(basic.json()["data"]) == 25
    assert basic.json()["next_page"] is None
    default = store_api.admin("GET", f"/v1/memory_stores/{store}/memories")
    assert len(default.json()["data"]) == 20


def test_exact_page_boundary_has_no_next_page(store_api: StoreApi) -> None:
    store = store_api.new_store()
    for i in range(4):
        store_api.create(store, f"/m{i}", "x")
    resp = store_api.admin("GET", f"/v1/memory_stores/{store}/memories", params={"limit": 4})
    assert len(resp.json()["data"]) == 4
    assert resp.json()["next_page"] is None
    empty = store_api.new_store()
    resp = store_api.admin("GET", f"/v1/memory_stores/{empty}/memories")
    assert resp.json() == {"data": [], "next_page": None}


def test_memories_of_another_store_are_not_reachable(store_api: StoreApi) -> None:
    one, two = store_api.new_store(), store_api.new_store()
    mem = store_api.create(one, "/a", "x")
    _error(store_api.admin("GET", f"/v1/memory_stores/{two}/memories/{mem['id']}"), 404, "not_found_error")
    _error(_update(store_api, two, mem["id"], content="y"), 404, "not_found_error")
    _error(store_api.admin("DELETE", f"/v1/memory_stores/{two}/memories/{mem['id']}"), 404, "not_found_error")
    assert store_api.paths(two) == []
    assert store_api.paths(one) == ["/a"]


def test_beta_query_is_optional(store_api: StoreApi) -> None:
    store = store_api.new_store()
    resp = store_api.http.get(
        f"/v1/memory_stores/{store}/memories", headers={"x-api-key": store_api.server.admin_key}
    )
    assert resp.status_code == 200
    resp = store_api.admin("GET", f"/v1/memory_stores/{store}/memories", params={"beta": "false"})
    assert resp.status_code == 200


# --- conditional listing (memsync extension) ------------------------------------------------------------


def _listing(store_api: StoreApi, store: str, etag: str | None = None, **params: Any) -> Any:
    headers = {"if-none-match": etag} if etag is not None else {}
    return store_api.admin("GET", f"/v1/memory_stores/{store}/memories", params=params, headers=headers)


def test_listing_etag_answers_304_until_any_memory_changes(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a.md", "alpha")
    first = _listing(store_api, store)
    etag = first.headers["etag"]
    assert first.status_code == 200 and etag.startswith('"')
    again = _listing(store_api, store, etag)
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    assert _listing(store_api, store, f"W/{etag}").status_code == 304  # weak comparison
    assert _listing(store_api, store, f'"other", {etag}').status_code == 304  # a list
    assert _listing(store_api, store, '"other"').status_code == 200

    url = f"/v1/memory_stores/{store}/memories/{mem['id']}"
    # a no-op update writes nothing, so the ETag holds
    assert store_api.admin("POST", url, json={"content": "alpha"}).status_code == 200
    assert _listing(store_api, store, etag).status_code == 304

    seen = {etag}
    for change in (
        lambda: store_api.admin("POST", url, json={"content": "beta"}),
        lambda: store_api.admin("POST", url, json={"path": "/b.md"}),
        lambda: store_api.admin(
            "POST", f"/v1/memory_stores/{store}/memories", json={"path": "/c", "content": ""}
        ),
        lambda: store_api.admin("DELETE", url),
    ):
        assert change().status_code == 200
        answer = _listing(store_api, store, etag)
        assert answer.status_code == 200, "a changed store must not answer 304"
        etag = answer.headers["etag"]
        assert etag not in seen
        seen.add(etag)


def test_listing_etag_differs_between_queries_and_stores(store_api: StoreApi) -> None:
    store = store_api.new_store()
    other = store_api.new_store()
    for path in ("/d/one", "/d/two", "/e"):
        store_api.create(store, path, "x")
    base = _listing(store_api, store).headers["etag"]
    variants = [
        _listing(store_api, store, limit=1).headers["etag"],
        _listing(store_api, store, depth=1).headers["etag"],
        _listing(store_api, store, path_prefix="/d/").headers["etag"],
        _listing(store_api, store, view="full").headers["etag"],
        _listing(store_api, other).headers["etag"],
    ]
    assert len({base, *variants}) == 6
    assert _listing(store_api, store, base, limit=1).status_code == 200


def test_conditional_listing_still_checks_the_caller(store_api: StoreApi) -> None:
    store = store_api.new_store()
    elsewhere = store_api.new_store()
    etag = _listing(store_api, store).headers["etag"]
    url = f"/v1/memory_stores/{store}/memories"
    assert store_api.anon("GET", url, headers={"if-none-match": etag}).status_code == 401
    token = store_api.session_token([(elsewhere, "read_only")])
    assert store_api.bearer(token, "GET", url, headers={"if-none-match": etag}).status_code == 404
