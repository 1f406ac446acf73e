"""The store server's decisions as pure functions over plain data.

Validation of names, metadata, paths and content; the metadata patch; what an update does given the stored
memory; path-overlap candidates; listing rollups and where a listing resumes. Each raises ``ApiError`` (plain
data) or returns a value; none touches the database or the network.
"""

from __future__ import annotations

import functools
import hashlib
import json
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Generic, TypeVar, get_args

from memsync.api.constants import (
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_FULL_MAX,
    LIST_LIMIT_MAX,
    MAX_CONTENT_BYTES,
    METADATA_KEY_MAX,
    METADATA_MAX_PAIRS,
    METADATA_VALUE_MAX,
    STORE_DESCRIPTION_MAX,
    STORE_NAME_MAX,
)
from memsync.api.hashing import sha256_bytes
from memsync.api.models import Operation, View
from memsync.api.paths import PathRuleViolation, is_ancestor, path_violation, validate_path_prefix
from memsync.server.bodies import utf8_bytes, validate_stored_text
from memsync.server.errors import invalid
from memsync.server.ids import format_ts

R = TypeVar("R")

VIEWS = get_args(View)
OPERATIONS = get_args(Operation)

# --- text checks ----------------------------------------------------------------------------------------


def _control_char(value: str) -> str | None:
    for ch in value:
        if unicodedata.category(ch) == "Cc":
            return f"U+{ord(ch):04X}"
    return None


def validate_store_name(name: str) -> str:
    utf8_bytes(name, "name")
    if not 1 <= len(name) <= STORE_NAME_MAX:
        raise invalid(f"name must be 1 to {STORE_NAME_MAX} characters, got {len(name)}")
    bad = _control_char(name)
    if bad is not None:
        raise invalid(f"name must not contain control characters (found {bad})")
    if not name.strip():
        raise invalid("name must not be blank")
    return name


def validate_description(description: str) -> str:
    validate_stored_text(description, "description")
    if len(description) > STORE_DESCRIPTION_MAX:
        raise invalid(
            f"description must be at most {STORE_DESCRIPTION_MAX} characters, got {len(description)}"
        )
    return description


def validate_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    if len(metadata) > METADATA_MAX_PAIRS:
        raise invalid(f"metadata must have at most {METADATA_MAX_PAIRS} keys, got {len(metadata)}")
    for key, value in metadata.items():
        validate_stored_text(key, "metadata key")
        validate_stored_text(value, f"metadata[{key!r}]")
        if not 1 <= len(key) <= METADATA_KEY_MAX:
            raise invalid(f"metadata key {key!r} must be 1 to {METADATA_KEY_MAX} characters")
        if len(value) > METADATA_VALUE_MAX:
            raise invalid(
                f"metadata[{key!r}] must be at most {METADATA_VALUE_MAX} characters, got {len(value)}"
            )
    return dict(metadata)


def merge_metadata(current: Mapping[str, str], patch: Mapping[str, str | None] | None) -> dict[str, str]:
    """Apply a metadata patch: a string upserts the key, ``None`` deletes it; no patch keeps the bag."""
    merged = dict(current)
    if patch is None:
        return merged
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return validate_metadata(merged)


def validate_memory_path(path: str, field: str = "path") -> str:
    """A valid memory path, or a 400 whose message names the broken rule."""
    utf8_bytes(path, field)
    violation = path_violation(path)
    if violation is not None:
        raise invalid(f"{field}: {violation.message} (rule: {violation.rule})")
    return path


def validate_list_prefix(prefix: str | None) -> str:
    """The ``path_prefix`` filter, normalised to ``/`` when absent."""
    if prefix is None or prefix == "":
        return "/"
    utf8_bytes(prefix, "path_prefix")
    try:
        return validate_path_prefix(prefix)
    except PathRuleViolation as exc:
        raise invalid(f"path_prefix: {exc.message} (rule: {exc.rule})") from None


@dataclass(frozen=True)
class Content:
    text: str
    sha256: str
    size: int


def check_content(content: str | None) -> Content:
    """Content as stored: exact UTF-8 bytes hashed, no normalisation; over 102,400 bytes is a 400."""
    text = "" if content is None else content
    data = utf8_bytes(text, "content")
    if len(data) > MAX_CONTENT_BYTES:
        raise invalid(f"content is {len(data)} bytes of UTF-8; at most {MAX_CONTENT_BYTES} bytes are allowed")
    return Content(text=text, sha256=sha256_bytes(data), size=len(data))


# --- query parameters -----------------------------------------------------------------------------------


def resolve_view(view: str | None, default: str) -> str:
    if view is None:
        return default
    if view not in VIEWS:
        raise invalid(f"view must be 'basic' or 'full', got {view!r}")
    return view


def resolve_limit(limit: int | None, view: str) -> int:
    """1–100 (default 20); a ``view=full`` listing is silently capped at 20 items per page."""
    if limit is None:
        return LIST_LIMIT_DEFAULT
    if not 1 <= limit <= LIST_LIMIT_MAX:
        raise invalid(f"limit must be between 1 and {LIST_LIMIT_MAX}, got {limit}")
    if view == "full":
        return min(limit, LIST_LIMIT_FULL_MAX)
    return limit


def resolve_depth(depth: int | None) -> int:
    if depth is None:
        return 0
    if depth not in (0, 1):
        raise invalid(f"depth must be 0 (whole subtree) or 1 (direct children), got {depth}")
    return depth


def resolve_operation(operation: str | None) -> str | None:
    if operation is not None and operation not in OPERATIONS:
        raise invalid(f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    return operation


def parse_timestamp_filter(value: str | None, name: str) -> str | None:
    """An RFC 3339 query value as the server's fixed-width UTC timestamp string (naive means UTC)."""
    if value is None:
        return None
    example = "such as 2026-01-31T12:00:00Z"
    try:
        moment = datetime.fromisoformat(value.strip().replace(" ", "+"))
    except ValueError:
        raise invalid(f"{name} must be an RFC 3339 timestamp {example}, got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return format_ts(moment)
    except (OverflowError, ValueError):
        # e.g. 0001-01-01T00:00:00+01:00 is a valid text but falls before year 1 once in UTC
        raise invalid(
            f"{name} is out of range: {value!r} is not between years 1 and 9999 in UTC; "
            f"pass a timestamp {example}"
        ) from None


# --- memory writes --------------------------------------------------------------------------------------


class UpdateDecision(Enum):
    NOOP = "noop"  # the stored memory already is what the request asks for: 200, no version
    APPLY = "apply"  # a real change: write it and append a `modified` version
    PRECONDITION_FAILED = "precondition_failed"


def decide_update(
    *,
    stored_path: str,
    stored_content: str,
    stored_sha256: str,
    new_content: str | None,
    new_path: str | None,
    precondition_sha256: str | None,
) -> UpdateDecision:
    """What an update does. A request whose state already matches the stored one is a 200 no-op even when its
    precondition names an older hash: that is what makes a retried update (first response lost) safe."""
    content_same = new_content is None or new_content == stored_content
    path_same = new_path is None or new_path == stored_path
    if content_same and path_same:
        return UpdateDecision.NOOP
    if precondition_sha256 is not None and precondition_sha256 != stored_sha256:
        return UpdateDecision.PRECONDITION_FAILED
    return UpdateDecision.APPLY


def ancestor_paths(path: str) -> list[str]:
    """Every strict ancestor of a memory path: ``/a/b/c`` → ``['/a', '/a/b']``."""
    segments = path[1:].split("/")
    return ["/" + "/".join(segments[:i]) for i in range(1, len(segments))]


def descendant_range(path: str) -> tuple[str, str]:
    """``[low, high)`` holding exactly the paths below ``path`` in byte order (``'/'`` + 1 is ``'0'``)."""
    return path + "/", path + "0"


def describe_path_conflict(requested: str, blocker_path: str, blocker_id: str, verb: str = "create") -> str:
    if blocker_path == requested:
        relation = "a memory already exists at that path"
    elif is_ancestor(blocker_path, requested):
        relation = f"memory {blocker_id} at {blocker_path!r} is an ancestor of it"
    else:
        relation = f"memory {blocker_id} at {blocker_path!r} is below it"
    return f"cannot {verb} {requested!r}: {relation} ({verb} never overwrites and paths may not overlap)"


# --- listings -------------------------------------------------------------------------------------------


def listing_key(path: str, prefix: str, depth: int) -> str:
    """The item a memory at ``path`` shows up as: itself, or (``depth=1``) the rollup of its first segment
    below ``prefix``, a ``memory_prefix`` path ending in ``/``."""
    if depth == 0:
        return path
    rest = path[len(prefix) :]
    cut = rest.find("/")
    return path if cut < 0 else prefix + rest[: cut + 1]


def is_prefix_key(key: str) -> bool:
    return key.endswith("/")


def resume_after(key: str) -> tuple[str, bool]:
    """Where a path-ordered listing continues after item ``key``: ``(bound, inclusive)``.

    After a memory: strictly greater paths. After a rollup ``/a/x/``: from ``/a/x0`` on, which skips exactly
    the paths inside the rollup.
    """
    if is_prefix_key(key):
        return key[:-1] + "0", True
    return key, False


def prefix_upper_bound(prefix: str) -> str:
    """Exclusive upper bound of the paths under ``prefix`` (which ends with ``/``)."""
    return prefix[:-1] + "0"


def text_upper_bound(prefix: str) -> str:
    """Exclusive upper bound of every text starting with ``prefix`` (any text, not only a folder), in the
    code point order the databases sort paths in: the last character below U+10FFFF moved one code point up
    (over the surrogates, which UTF-8 cannot hold) and what follows it dropped; for a prefix of U+10FFFF
    alone, the prefix followed by more of them than a path's 1,024 bytes can hold."""
    for end in range(len(prefix), 0, -1):
        code = ord(prefix[end - 1])
        if code < 0x10FFFF:
            following = 0xE000 if 0xD800 <= code + 1 <= 0xDFFF else code + 1
            return prefix[: end - 1] + chr(following)
    return prefix + "\U0010ffff" * 1024


@dataclass(frozen=True)
class ListingPage(Generic[R]):
    """One page of a path-ordered memory listing: rows (memories) and ``str`` items (rollup prefixes)."""

    items: list[R | str]
    last_key: str | None  # the key of the last item, which a cursor resumes after
    has_more: bool


def collect_page(
    fetch: Callable[[str, bool, int], Sequence[R]],
    path_of: Callable[[R], str],
    *,
    prefix: str,
    depth: int,
    limit: int,
    after: str | None,
) -> ListingPage[R]:
    """Fill one page from ``fetch(bound, inclusive, n)`` (the next ``n`` rows under ``prefix`` from ``bound``
    on, in path order). With ``depth=1`` deeper rows collapse into one rollup per first segment; after a
    rollup the walk jumps past every path inside it. ``after`` is the key a cursor resumes after."""
    bound, inclusive = (prefix, True) if after is None else resume_after(after)
    items: list[R | str] = []
    last_key: str | None = None
    while len(items) < limit:
        want = limit - len(items)
        rows = fetch(bound, inclusive, want)
        rolled_up = False
        for row in rows:
            key = listing_key(path_of(row), prefix, depth)
            last_key = key
            bound, inclusive = resume_after(key)
            if is_prefix_key(key):
                items.append(key)
                rolled_up = True  # the rest of this batch may sit inside the rollup: fetch again from past it
                break
            items.append(row)
        if not rolled_up and len(rows) < want:
            return ListingPage(items, last_key, has_more=False)
    has_more = last_key is not None and bool(fetch(bound, inclusive, 1))
    return ListingPage(items, last_key, has_more)


# --- conditional listing (memsync extension) ------------------------------------------------------------


def listing_etag(
    store_id: str,
    change_id: str,
    change_seq: int,
    *,
    query: Mapping[str, object],
    limit: int,
    position: object,
) -> str:
    """The ETag of one memory-listing page: it changes whenever any memory of the store changes (the store's
    change counter and the id of its latest memory write, bumped in the write's transaction) and differs
    between queries, page sizes and positions. The change id is random, so a database restored to an older
    state and written again never repeats an ETag it handed out before."""
    return _listing_etag((store_id, change_id, change_seq, tuple(sorted(query.items())), limit, position))


@functools.lru_cache(maxsize=4096)
def _listing_etag(key: tuple[str, str, int, tuple[tuple[str, object], ...], int, object]) -> str:
    """Remembered: every sidecar probing a store asks for the same few ETags until the store changes."""
    store_id, change_id, change_seq, query, limit, position = key
    canonical = json.dumps(
        [store_id, change_id, change_seq, dict(query), limit, position], sort_keys=True, default=str
    )
    return '"' + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 weak comparison of an ``If-None-Match`` list (or ``*``) against ``etag``."""
    if if_none_match is None:
        return False
    for candidate in if_none_match.split(","):
        tag = candidate.strip()
        if tag == "*":
            return True
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag == etag:
            return True
    return False
