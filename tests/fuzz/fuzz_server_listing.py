"""The store server's listing inputs (server/stores/cursor.py, server/stores/rules.py): page cursors, the
listing's query parameters and the keyset walk they resume.

For any text: ``decode_cursor`` returns a position or raises only the documented 400 (``ApiError``), also for
a payload signed with the server's own key; a cursor altered in any way never resumes anywhere else than
the one it was made from; and ``decode_cursor(encode_cursor(state))`` is the state's position (a memory
path or a sequence number) while it has not expired. The query parameters (``view``, ``limit``, ``depth``,
``operation``, ``path_prefix``, ``created_at[gte|lte]``, ``If-None-Match``) are accepted or refused with a
400, raising nothing else; an accepted timestamp filter is the server's fixed-width UTC form, so two of them
compare as the instants do.
Over any set of memory paths, walking a listing page by page (any ``path_prefix``, ``depth`` 0 or 1 and
``limit``), each page resumed through a real cursor, returns every memory under the prefix (or, with depth
1, its direct memories and one ``memory_prefix`` per folder) exactly once, in path order.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime

from harness import Provider, holds, one_of, path_text, pick

from memsync.api.paths import path_violation
from memsync.server.errors import ApiError
from memsync.server.stores import rules
from memsync.server.stores.cursor import CursorState, decode_cursor, encode_cursor, query_fingerprint

KEY = hashlib.sha256(b"fuzz cursor key").digest()
NOW = 1_800_000_000.0
FINGERPRINT = query_fingerprint({"kind": "memories", "store": "memstore_a", "prefix": "/", "depth": 0})
SEGMENTS = ("a", "b", "a-b", "a.md", "a0", "é", "x y", "Z", "\u00ff", "\U0001f600", "a" * 40)
TIMESTAMPS = (
    "2026-01-31T12:00:00Z",
    "0999-12-31T23:59:59Z",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
)


def expect_400(call: object, *args: object) -> object:
    """``call(*args)``, or None when it raised the documented 400; anything else escapes."""
    assert callable(call)
    try:
        return call(*args)
    except ApiError as exc:
        holds(exc.status == 400, f"{getattr(call, '__name__', call)}{args!r}: {exc.status} {exc.message}")
        return None


def check_cursors(fdp: Provider) -> None:
    # What the server puts in a cursor: the last memory path of a page, or a sequence number.
    position: str | int = path_text(fdp) if fdp.ConsumeBool() else fdp.ConsumeInt(8)
    if isinstance(position, str) and path_violation(position) is not None:
        position = "/a"
    token = encode_cursor(KEY, CursorState(position, FINGERPRINT, int(NOW) + 3600))
    holds(decode_cursor(KEY, token, FINGERPRINT, NOW) == position, f"{position!r} did not survive its cursor")
    # An altered cursor: a span replaced by the input's text.
    start = fdp.ConsumeIntInRange(0, len(token))
    end = fdp.ConsumeIntInRange(start, len(token))
    altered = token[:start] + fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 12)) + token[end:]
    resumed = expect_400(decode_cursor, KEY, altered, FINGERPRINT, NOW)
    holds(resumed is None or resumed == position, f"altered cursor {altered!r} resumes at {resumed!r}")
    # Any text as a cursor, and any payload signed with the server's key.
    expect_400(decode_cursor, KEY, fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 200)), FINGERPRINT, NOW)
    payload = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200))
    sig = hmac.new(KEY, b"memsync-cursor-v1\x00" + payload, hashlib.sha256).digest()[:16]
    signed = (
        "page_"
        + "".join(base64.urlsafe_b64encode(p).decode().rstrip("=") + "." for p in (payload,))
        + (base64.urlsafe_b64encode(sig).decode().rstrip("="))
    )
    expect_400(decode_cursor, KEY, signed, FINGERPRINT, NOW)


def instant(text: str) -> datetime:
    """The moment a filter names, as the API documents it (RFC 3339; without an offset it is UTC)."""
    moment = datetime.fromisoformat(text.strip().replace(" ", "+"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def check_parameters(fdp: Provider) -> None:
    text = fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 60))
    expect_400(rules.resolve_view, text if fdp.ConsumeBool() else None, "basic")
    expect_400(rules.resolve_limit, fdp.ConsumeInt(4), pick(fdp, ("basic", "full")))
    expect_400(rules.resolve_depth, fdp.ConsumeInt(4))
    expect_400(rules.resolve_operation, text)
    expect_400(rules.validate_list_prefix, path_text(fdp))
    holds(isinstance(rules.etag_matches(text, '"abc"'), bool), "etag_matches")
    moments = [pick(fdp, TIMESTAMPS) if fdp.ConsumeBool() else fdp.ConsumeUnicode(30) for _ in range(2)]
    parsed = [expect_400(rules.parse_timestamp_filter, m, "created_at[gte]") for m in moments]
    if None in parsed:
        return
    a, b = (instant(m) for m in moments)
    fa, fb = parsed
    assert isinstance(fa, str) and isinstance(fb, str)
    holds(len(fa) == len(fb) == 27, f"timestamp filters {moments} became {fa!r} and {fb!r}")
    holds((fa < fb) == (a < b) and (fa == fb) == (a == b), f"{moments} became {fa!r}, {fb!r}: another order")


def memory_paths(fdp: Provider) -> list[str]:
    """Distinct valid paths none of which is an ancestor of another (the store's own rule)."""
    paths: set[str] = set()
    for _ in range(fdp.ConsumeIntInRange(0, 30)):
        path = "/" + "/".join(pick(fdp, SEGMENTS) for _ in range(fdp.ConsumeIntInRange(1, 4)))
        if path_violation(path) is None and not any(
            p.startswith(path + "/") or path.startswith(p + "/") for p in paths
        ):
            paths.add(path)
    return sorted(paths)


def expected_listing(paths: list[str], prefix: str, depth: int) -> list[str]:
    keys = set()
    for path in paths:
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix) :]
        keys.add(path if depth == 0 or "/" not in rest else prefix + rest.split("/", 1)[0] + "/")
    return sorted(keys)


def check_walk(fdp: Provider) -> None:
    paths = memory_paths(fdp)
    prefix = pick(fdp, ["/", *(p.rsplit("/", 1)[0] + "/" for p in paths if p.count("/") > 1)])
    depth, limit = fdp.ConsumeIntInRange(0, 1), fdp.ConsumeIntInRange(1, 5)

    def fetch(bound: str, inclusive: bool, count: int) -> list[str]:
        upper = rules.prefix_upper_bound(prefix)
        return [p for p in paths if (p >= bound if inclusive else p > bound) and p < upper][:count]

    walked: list[str] = []
    position: str | int | None = None
    for _ in range(len(paths) + 2):
        page = rules.collect_page(fetch, lambda p: p, prefix=prefix, depth=depth, limit=limit, after=position)
        holds(len(page.items) <= limit, f"a page of {len(page.items)} items for limit {limit}")
        walked.extend(page.items)
        if not page.has_more:
            break
        holds(page.last_key is not None, "a page with more to come has no position")
        assert page.last_key is not None
        token = encode_cursor(KEY, CursorState(page.last_key, FINGERPRINT, int(NOW) + 60))
        position = decode_cursor(KEY, token, FINGERPRINT, NOW)
    else:
        holds(False, f"the walk over {paths} (prefix {prefix!r}, depth {depth}, limit {limit}) does not end")
    expected = expected_listing(paths, prefix, depth)
    holds(walked == expected, f"walk over {paths} ({prefix!r}, depth {depth}, limit {limit}) gave {walked}")


def test_one_input(data: bytes) -> None:
    one_of(data, check_cursors, check_parameters, check_walk)
