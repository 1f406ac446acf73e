"""The log wordings operators grep for (docs/sync-semantics.md quotes them), in one place.

Each constant is a fixed, documented fragment; the sync agent's log messages contain them verbatim
and tests assert on these same constants, so a reworded message fails a test instead of an operator's alert.
"""

from typing import Final

from memsync.api.secret import NO_SESSIONS_TOKEN

__all__ = ["NO_SESSIONS_TOKEN"]

# --- mount (docs/sync-semantics.md#mount) ----------------------------------------------------------------
ALREADY_EXISTS: Final = "something already exists at the memory store's path"
CANNOT_CREATE: Final = "cannot create the memory store's folder"
MAKE_WRITABLE: Final = "the worker host must make this mount path writable"
NOT_CLEAN_PATH: Final = "memory store mount_path is not a clean absolute path"
MOUNT_INTERRUPTED: Final = (
    "mount interrupted by SIGTERM (the Pod is being deleted): the folders made so far were removed; "
    "nothing was written to any store"
)
DOWNLOAD_FAILED: Final = "failed to download memory store memory_store_id="

# --- periodic sync (docs/sync-semantics.md#three-way-merge) -----------------------------------------------
SYNC_FAILED: Final = "memory sync failed"
LEFT_AS_FOUND: Final = "leaving the memory store folder as found and not syncing"
RECREATING: Final = "memory deleted remotely but edited locally; re-creating it from the file"
RESTORING: Final = "memory deleted locally but changed remotely; restoring the remote version"
BOTH_CHANGED: Final = "memory changed both locally and remotely; keeping the remote version"
DELETE_CAP: Final = "delete cap reached"
LOG_ONLY_DELETE: Final = "log-only: sync would delete this memory on the server"
PROPAGATED_DELETE: Final = "propagated local deletion"
DELETE_LOST: Final = "memory deleted locally but changed remotely; keeping the remote version"
DELETES_DISABLED: Final = "remote deletes are disabled"

# --- uploads (docs/sync-semantics.md#uploads-and-preconditions) -------------------------------------------
UPLOAD_LOST: Final = (
    "memory changed both locally and remotely; the upload was refused and the local edit loses"
)
REFUSED: Final = "the server rejected this memory file, so it stays un-synced until its content changes"
LOCAL_REFUSED: Final = (
    "this file cannot be a memory (over the size limit or not UTF-8 text), so it stays un-synced until its "
    "content changes"
)
UPLOAD_FAILED: Final = "failed to upload memory"

# --- shutdown (docs/sync-semantics.md#sync-flush-and-the-final-shutdown) ----------------------------------
FINAL_CUT_OFF: Final = (
    "final memory sync cut off after {ms}ms; the flush that follows still uploads changed files"
)
FLUSH_CUT_OFF: Final = (
    "memory flush cut off after {ms}ms; changed files it had not uploaded yet are not saved"
)
FLUSH_UNSENT: Final = "{unsent} of {changed} changed files had not finished uploading"

# --- memsync's own (beyond the official SDKs' wordings) ----------------------------------------------------
READ_ONLY_LOCAL_EDIT: Final = (
    "local change in a read-only memory store is never uploaded; the next remote change overwrites it"
)
NOT_REGULAR: Final = (
    "not a regular file (symlink, FIFO, device or socket); leaving it alone and not syncing it"
)
BAD_NAME: Final = (
    "file name cannot be a memory path (not UTF-8, too long, or a character memory paths refuse); leaving it "
    "alone and not syncing it"
)
UNSAFE_REMOTE_PATH: Final = "memory path cannot be mapped safely into the store folder; skipping it"
PATH_TAKEN: Final = "the memory's path is held by another memory in the store; the next sync reconciles it"
PATH_CLASH: Final = (
    "local file clashes with a memory in the store (a file where the store has a folder, or the reverse); "
    "keeping the remote version"
)
ROOT_REPLACED: Final = "the memory store folder was replaced (now a symlink or another directory)"
MARKER_BAD: Final = "the memory store folder's marker file is missing or does not match this store"
UNREADABLE: Final = (
    "cannot read this file (or folder); skipping it: it is not synced, overwritten or deleted, and is tried "
    "again on every pass"
)
WAITS_FOR_DELETE: Final = (
    "new file waits for the deletion of this session's memory in its way (a file replaced by a folder of "
    "the same name, or the reverse); it is created once that memory is deleted"
)
BLOCKED_BY_KEPT_MEMORY: Final = (
    "new file cannot be created: a memory this session deleted locally is in its way, and remote deletes "
    "are not enabled, so it stays in the store"
)
HELD_AT_END: Final = (
    "session ending with {held} local deletion(s) held back by the delete cap; those memories stay in the "
    "store"
)
UNWRITABLE: Final = (
    "memory cannot be written to its local path; skipping it and trying again on the next pass"
)
CONFLICT_COPY: Final = "kept the local version beside the file as a conflict copy; it syncs as a new file"
CONFLICT_COPY_REFUSED: Final = "cannot keep the local version as a conflict copy; it is lost to the store's"
