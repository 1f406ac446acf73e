"""Memory path rules and the mount-path slug (``/mnt/memory/<slug of the store name>``).

Pure functions: the server uses them to refuse bad paths with a message naming the rule; the sync agent
uses them before a remote path is ever turned into a local one.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from memsync.api.constants import MAX_PATH_BYTES, MAX_PATH_SEGMENTS, MOUNT_ROOT


@dataclass(frozen=True)
class PathRuleViolation(ValueError):
    """A memory path broke one rule; ``rule`` is a stable identifier, ``message`` says what is allowed."""

    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return self.message


_LINE_SEPARATORS = {"\u2028", "\u2029"}
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _bad_character(ch: str) -> str | None:
    if ch in _LINE_SEPARATORS:
        return "line or paragraph separator (U+2028/U+2029)"
    category = unicodedata.category(ch)
    if category == "Cc":
        return f"control character U+{ord(ch):04X}"
    if category == "Cf":
        return f"format character U+{ord(ch):04X}"
    if category == "Cs":
        # A lone surrogate: a Python string may hold one (JSON's "\ud800", an undecodable file name as
        # os.fsdecode escapes it), UTF-8 cannot.
        return f"lone surrogate U+{ord(ch):04X} (not valid Unicode)"
    return None


def path_violation(path: str) -> PathRuleViolation | None:
    """Return the first rule ``path`` breaks, or None when it is a valid memory path."""
    broken = _length_rule(path) or _character_rule(path) or _segment_rule(path)
    if broken is None:
        return None
    rule, message = broken
    return PathRuleViolation(path, rule, f"path {path!r}: {message}")


def _length_rule(path: str) -> tuple[str, str] | None:
    if not path.startswith("/"):
        return "leading_slash", "must start with '/'"
    if len(path) < 2:
        return "too_short", "must name at least one segment after '/'"
    # surrogatepass: a lone surrogate is measured here and refused by the character rule, never raised on
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return "too_long", f"must be at most {MAX_PATH_BYTES} bytes of UTF-8"
    return None


def _character_rule(path: str) -> tuple[str, str] | None:
    # ASCII is always NFC and has no format characters: only its control characters need a look. This
    # check runs for every listed memory on every pass, so the common case skips the per-character walk.
    if path.isascii() and not _ASCII_CONTROL.search(path):
        return None
    for ch in path:
        why = _bad_character(ch)
        if why is not None:
            return "bad_character", f"must not contain a {why}"
    if unicodedata.normalize("NFC", path) != path:
        return "not_nfc", "must be NFC-normalized Unicode"
    return None


def _segment_rule(path: str) -> tuple[str, str] | None:
    segments = path[1:].split("/")
    if len(segments) > MAX_PATH_SEGMENTS:
        return "too_deep", f"must have at most {MAX_PATH_SEGMENTS} segments"
    for segment in segments:
        if segment == "":
            return "empty_segment", "must not contain empty segments ('//' or a trailing '/')"
        if segment in (".", ".."):
            return "dot_segment", "must not contain '.' or '..' segments"
    return None


def validate_path(path: str) -> str:
    """Return ``path`` unchanged, or raise PathRuleViolation naming the rule it breaks."""
    violation = path_violation(path)
    if violation is not None:
        raise violation
    return path


def validate_path_prefix(prefix: str) -> str:
    """A ``path_prefix`` list filter: a valid path followed by '/', or '/' alone."""
    if prefix == "/":
        return prefix
    if not prefix.endswith("/"):
        raise PathRuleViolation(prefix, "prefix_trailing_slash", f"path_prefix {prefix!r}: must end with '/'")
    validate_path(prefix[:-1])
    return prefix


def is_ancestor(ancestor: str, path: str) -> bool:
    """Whether memory path ``ancestor`` is a strict ancestor directory of ``path`` (whole segments)."""
    return path.startswith(ancestor + "/")


_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def slugify(name: str) -> str:
    """The mount slug of a store name: lowercase, each run of non-alphanumerics one hyphen.

    Where the hosted API is silent, memsync decides: only ASCII letters and digits survive (anything else
    is a separator), leading and trailing hyphens are trimmed, and a name with no letters or digits gives ''
    (callers then fall back to the store id).
    """
    return _NON_ALNUM.sub("-", name.lower()).strip("-")


def default_mount_path(name: str, memory_store_id: str) -> str:
    """``/mnt/memory/<slug>``, falling back to the store id when the name yields no slug."""
    return f"{MOUNT_ROOT}/{slugify(name) or slugify(memory_store_id) or 'store'}"


def is_clean_absolute_path(path: str) -> bool:
    """Absolute, no empty, '.' or '..' segment, no trailing slash, no NUL or backslash."""
    if not path.startswith("/") or path == "/" or path.endswith("/"):
        return False
    if "\x00" in path or "\\" in path:
        return False
    return all(seg not in ("", ".", "..") for seg in path[1:].split("/"))
