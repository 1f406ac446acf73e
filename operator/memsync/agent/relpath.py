"""Relative store paths (``notes/todo.md``, the wire path without its leading ``/``) and which are safe.

A path is refused in both directions by the same check: one that could escape the store folder, collide
with memsync's own files (the marker, temp files) or not fit a file name never becomes a local file, and a
local file at such a path is never uploaded.
"""

from __future__ import annotations

import re

from memsync.api.constants import MARKER_FILENAME
from memsync.api.paths import path_violation

TEMP_NAME = re.compile(r"^\.fs-[0-9a-f]{16}\.tmp$")
NAME_MAX_BYTES = 255


class UnsafePath(ValueError):
    """A path that must never become a local file (it could escape the folder, or collide with our own)."""


def path_problem(rel: str) -> str | None:
    """Why the relative store path ``rel`` cannot be synced safely, or None when it can.

    Applied in both directions: a remote path that fails is never written locally, and a local file whose
    path fails is never uploaded (or its remote twin could never come back down).
    """
    if not rel:
        return "empty path"
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    violation = path_violation("/" + rel)
    if violation is not None:
        return violation.message
    if "\\" in rel:
        return "contains a backslash"
    if rel == MARKER_FILENAME:
        return "is the store's marker file, which never syncs"
    for segment in rel.split("/"):
        if len(segment.encode("utf-8")) > NAME_MAX_BYTES:
            return f"has a segment longer than {NAME_MAX_BYTES} bytes"
        if TEMP_NAME.match(segment):
            return "looks like one of memsync's temporary files"
    return None


def remote_to_rel(remote_path: str) -> str:
    """Map a wire path (``/notes/todo.md``) to a relative store path, or raise UnsafePath."""
    if not remote_path.startswith("/"):
        raise UnsafePath(f"path {remote_path!r}: must start with '/'")
    rel = remote_path[1:]
    if "\x00" in rel:
        raise UnsafePath(f"path {remote_path!r}: contains NUL")
    problem = path_problem(rel)
    if problem is not None:
        raise UnsafePath(f"path {remote_path!r}: {problem}")
    return rel


def rel_to_remote(rel: str) -> str:
    return "/" + rel
