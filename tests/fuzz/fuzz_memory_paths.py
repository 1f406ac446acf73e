"""Memory path rules (api/paths.py): any string gets an answer, never an exception, and an accepted path is
one segment list that cannot leave the folder it is put under.

For any string: ``path_violation`` returns None or a ``PathRuleViolation`` naming one of the documented rules
(it raises nothing); ``validate_path`` returns the path exactly when there is no violation and raises only
that violation otherwise; ``validate_path_prefix`` returns the prefix or raises only ``PathRuleViolation``.
An accepted path is absolute, NFC, at most 1,024 bytes of UTF-8 and 20 segments, holds no empty, '.' or '..'
segment and no control, format or line-separator character, is a clean absolute path
(``is_clean_absolute_path``) when it has no backslash, and joined under any root stays below it.
``is_ancestor`` of two accepted paths is exactly "whole leading segments". ``slugify`` gives lowercase ASCII
letters and digits joined by single hyphens (or ''), is idempotent, and ``default_mount_path`` is one
segment below the mount root.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata

from harness import holds, path_text, provider

from memsync.api.constants import MAX_PATH_BYTES, MAX_PATH_SEGMENTS, MOUNT_ROOT
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

RULES = frozenset(
    {
        "leading_slash",
        "too_short",
        "too_long",
        "bad_character",
        "not_nfc",
        "too_deep",
        "empty_segment",
        "dot_segment",
    }
)
SLUG = re.compile(r"(?:[a-z0-9]+(?:-[a-z0-9]+)*)?")


def check_path(path: str) -> bool:
    """The property for one string; whether it was accepted."""
    violation = path_violation(path)
    if violation is not None:
        holds(isinstance(violation, PathRuleViolation), f"{violation!r} is not a PathRuleViolation")
        holds(violation.rule in RULES, f"unknown rule {violation.rule!r} for {path!r}")
        holds(violation.path == path and str(violation) == violation.message, f"violation of {path!r}")
        try:
            validate_path(path)
        except PathRuleViolation as exc:
            holds(exc.rule == violation.rule, f"validate_path and path_violation disagree on {path!r}")
        else:
            holds(False, f"validate_path accepted {path!r}, which breaks {violation.rule}")
        return False
    holds(validate_path(path) == path, f"validate_path changed {path!r}")
    segments = path[1:].split("/")
    holds(path.startswith("/") and len(path) > 1, f"accepted {path!r} without a leading '/'")
    holds(len(path.encode("utf-8")) <= MAX_PATH_BYTES, f"accepted {path!r}: over {MAX_PATH_BYTES} bytes")
    holds(len(segments) <= MAX_PATH_SEGMENTS, f"accepted {path!r}: over {MAX_PATH_SEGMENTS} segments")
    holds(all(s not in ("", ".", "..") for s in segments), f"accepted {path!r}: empty or dot segment")
    holds(unicodedata.normalize("NFC", path) == path, f"accepted {path!r}: not NFC")
    holds(
        not any(unicodedata.category(c) in ("Cc", "Cf") or c in "\u2028\u2029" for c in path),
        f"accepted {path!r}: a control, format or separator character",
    )
    if "\\" not in path:
        holds(is_clean_absolute_path(path), f"accepted {path!r} is not a clean absolute path")
    root = "/srv/store"
    joined = posixpath.normpath(root + path)
    holds(joined.startswith(root + "/"), f"accepted {path!r} leaves {root}: {joined}")
    return True


def check_prefix(prefix: str) -> None:
    try:
        accepted = validate_path_prefix(prefix)
    except PathRuleViolation:
        return
    holds(accepted == prefix, f"validate_path_prefix changed {prefix!r}")
    holds(
        prefix == "/" or (prefix.endswith("/") and path_violation(prefix[:-1]) is None), f"prefix {prefix!r}"
    )


def check_ancestry(a: str, b: str) -> None:
    sa, sb = a[1:].split("/"), b[1:].split("/")
    expected = len(sa) < len(sb) and sb[: len(sa)] == sa
    holds(is_ancestor(a, b) == expected, f"is_ancestor({a!r}, {b!r}) is {not expected}")


def check_slug(name: str, store_id: str) -> None:
    slug = slugify(name)
    holds(SLUG.fullmatch(slug) is not None, f"slugify({name!r}) = {slug!r}")
    holds(slugify(slug) == slug, f"slugify is not idempotent on {slug!r}")
    mount = default_mount_path(name, store_id)
    holds(posixpath.dirname(mount) == MOUNT_ROOT, f"default_mount_path({name!r}) = {mount!r}")
    holds(is_clean_absolute_path(mount), f"default_mount_path({name!r}) = {mount!r} is not clean")


def test_one_input(data: bytes) -> None:
    fdp = provider(data)
    first, second = path_text(fdp), path_text(fdp)
    if check_path(first) and check_path(second):
        check_ancestry(first, second)
    else:
        check_path(second)
    check_prefix(first + "/" if fdp.ConsumeBool() else first)
    check_slug(second, first)
