"""A store path's local mapping (agent/relpath.py): a remote path the agent accepts never escapes the store
folder and never collides with memsync's own files, and the same rule decides both directions.

For any string: ``remote_to_rel`` returns a relative path or raises only ``UnsafePath``, and ``path_problem``
returns None or a reason (it raises nothing), for file names as the local scan sees them too (undecodable
bytes as surrogate escapes). An accepted path maps back unchanged (``rel_to_remote(remote_to_rel(p)) == p``),
is relative with no empty, '.' or '..' segment, no NUL and no backslash, has segments of at most 255 bytes,
is not the marker file and has no segment named like a temporary file, and joined under a folder stays
below it. ``path_problem(rel)`` is None exactly when ``remote_to_rel('/' + rel)`` accepts.
"""

from __future__ import annotations

import os
import posixpath

from harness import holds, path_text, provider

from memsync.agent.relpath import (
    NAME_MAX_BYTES,
    TEMP_NAME,
    UnsafePath,
    path_problem,
    rel_to_remote,
    remote_to_rel,
)
from memsync.api.constants import MARKER_FILENAME

FOLDER = "/mnt/memory/notes"


def check_accepted(remote: str, rel: str) -> None:
    holds(rel_to_remote(rel) == remote, f"{remote!r} -> {rel!r} does not map back")
    segments = rel.split("/")
    holds(
        not rel.startswith("/") and all(s not in ("", ".", "..") for s in segments), f"{remote!r} -> {rel!r}"
    )
    holds("\x00" not in rel and "\\" not in rel, f"accepted {remote!r} holds NUL or a backslash")
    holds(all(len(s.encode("utf-8")) <= NAME_MAX_BYTES for s in segments), f"accepted {remote!r}: long name")
    holds(rel != MARKER_FILENAME, f"accepted the marker's path {remote!r}")
    holds(not any(TEMP_NAME.match(s) for s in segments), f"accepted {remote!r}: a temporary file's name")
    joined = posixpath.normpath(posixpath.join(FOLDER, rel))
    holds(joined.startswith(FOLDER + "/"), f"accepted {remote!r} leaves the folder: {joined}")


def check(remote: str) -> None:
    try:
        rel = remote_to_rel(remote)
    except UnsafePath:
        rel = None
    if rel is not None:
        check_accepted(remote, rel)
    if remote.startswith("/"):
        problem = path_problem(remote[1:])
        holds(problem is None or isinstance(problem, str), f"path_problem({remote[1:]!r}) = {problem!r}")
        holds((problem is None) == (rel is not None), f"both directions disagree on {remote!r}: {problem}")


def test_one_input(data: bytes) -> None:
    fdp = provider(data)
    check(path_text(fdp))
    # A file name as the local scan reads it: bytes from the filesystem, undecodable ones as surrogates.
    name = os.fsdecode(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 300)))
    problem = path_problem(name)
    holds(problem is None or isinstance(problem, str), f"path_problem({name!r}) = {problem!r}")
    if problem is None:
        check_accepted("/" + name, name)
