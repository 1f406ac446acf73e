"""Content hashes exactly as the server computes them: SHA-256 of the UTF-8 bytes, no normalization."""

import hashlib

from memsync.api.constants import MARKER_FILENAME

__all__ = ["MARKER_FILENAME", "content_sha256", "marker_text", "sha256_bytes"]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_sha256(content: str) -> str:
    return sha256_bytes(content.encode("utf-8"))


def marker_text(memory_store_id: str) -> str:
    """The marker file's content: ``version 1``, newline, store id, no trailing newline.

    See docs/sync-semantics.md#the-marker-file.
    """
    return f"version 1\n{memory_store_id}"
