"""Memory path rules and mount slugs."""

import pytest

from memsync.api.paths import (
    PathRuleViolation,
    default_mount_path,
    is_ancestor,
    is_clean_absolute_path,
    path_violation,
    slugify,
    validate_path,
    validate_path_prefix,
)


@pytest.mark.parametrize(
    "path",
    ["/a", "/notes/todo.md", "/ünïcödé/ok", "/" + "x" * 1023, "/" + "/".join(["s"] * 20), "/a b/c-d_e.md"],
)
def test_valid_paths(path: str) -> None:
    assert path_violation(path) is None
    assert validate_path(path) == path


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("notes.md", "leading_slash"),
        ("", "leading_slash"),
        ("/", "too_short"),
        ("/" + "x" * 1024, "too_long"),
        ("/" + "é" * 512, "too_long"),  # 1,024 bytes of UTF-8 plus the slash
        ("/a\x00b", "bad_character"),
        ("/a\nb", "bad_character"),
        ("/a\u200bb", "bad_character"),  # zero-width space: a format character
        ("/a\u2028b", "bad_character"),
        ("/a\u2029b", "bad_character"),
        ("/cafe\u0301", "not_nfc"),
        ("/" + "/".join(["s"] * 21), "too_deep"),
        ("/a//b", "empty_segment"),
        ("/a/", "empty_segment"),
        ("/a/./b", "dot_segment"),
        ("/a/../b", "dot_segment"),
        ("/..", "dot_segment"),
    ],
)
def test_each_rule_is_named(path: str, rule: str) -> None:
    violation = path_violation(path)
    assert violation is not None
    assert violation.rule == rule
    assert repr(path) in violation.message
    with pytest.raises(PathRuleViolation) as caught:
        validate_path(path)
    assert caught.value.rule == rule


@pytest.mark.parametrize(
    "path",
    [
        "/a\ud800b",
        # found by the memory_paths fuzz target: the surrogate raised before any rule was looked at
        "/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s\udcff",
        "/" + "x" * 1000 + "\udcff",
    ],
)
def test_a_lone_surrogate_is_a_bad_character_not_an_exception(path: str) -> None:
    """A Python string may hold a lone surrogate (JSON's \\ud800, a file name os.fsdecode escaped); UTF-8
    cannot. Every rule check answers for it instead of raising UnicodeEncodeError."""
    violation = path_violation(path)
    assert violation is not None
    assert violation.rule == "bad_character"
    assert "lone surrogate" in violation.message
    with pytest.raises(PathRuleViolation):
        validate_path_prefix(path + "/")


def test_prefix_rules() -> None:
    assert validate_path_prefix("/") == "/"
    assert validate_path_prefix("/notes/") == "/notes/"
    with pytest.raises(PathRuleViolation, match="must end with '/'"):
        validate_path_prefix("/notes")
    with pytest.raises(PathRuleViolation):
        validate_path_prefix("/a/../")


def test_ancestor_is_whole_segments() -> None:
    assert is_ancestor("/notes", "/notes/todo.md")
    assert not is_ancestor("/notes", "/notes-archive/x")
    assert not is_ancestor("/notes", "/notes")


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("User Preferences", "user-preferences"),
        ("Demo Memory", "demo-memory"),
        ("  --Team   Notes!! ", "team-notes"),
        ("a__b..c", "a-b-c"),
        ("Café Notes", "caf-notes"),
        ("!!!", ""),
    ],
)
def test_slugify(name: str, slug: str) -> None:
    assert slugify(name) == slug


def test_default_mount_path_falls_back_to_the_store_id() -> None:
    assert default_mount_path("User Preferences", "memstore_01") == "/mnt/memory/user-preferences"
    assert default_mount_path("???", "memstore_01AB") == "/mnt/memory/memstore-01ab"


@pytest.mark.parametrize(
    ("path", "clean"),
    [
        ("/mnt/memory/x", True),
        ("/mnt/memory/x/y", True),
        ("mnt/memory/x", False),
        ("/mnt/memory/../etc", False),
        ("/mnt/memory/./x", False),
        ("/mnt/memory//x", False),
        ("/mnt/memory/x/", False),
        ("/mnt/memory/x\\y", False),
        ("/mnt/memory/x\x00", False),
        ("/", False),
    ],
)
def test_clean_absolute_paths(path: str, clean: bool) -> None:
    assert is_clean_absolute_path(path) is clean
