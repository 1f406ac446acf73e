"""The session runner's environment: what the sandbox container of an environment's session receives.

The operator sets these on the ``sandbox`` container of every Pod it starts for a claimed work item;
``memsync session run`` (or any runner image a user brings) reads them. The names are the ones the official
SDK's per-item worker reads, so an SDK-based runner needs no configuration of its own. The environment key
never enters a Pod: the work item's secret (its sessions token) covers everything the runner calls.
"""

from __future__ import annotations

from typing import Final

from memsync.contracts import env

WORK_ID: Final = "ANTHROPIC_WORK_ID"
ENVIRONMENT_ID: Final = "ANTHROPIC_ENVIRONMENT_ID"
SESSION_ID: Final = "ANTHROPIC_SESSION_ID"
WORK_SECRET: Final = env.WORK_SECRET
BASE_URL: Final = env.BASE_URL
#: The port the sync sidecar serves on, on the Pod's loopback (``http://127.0.0.1:<port>``; the same variable
#: the sidecar reads): ``POST /final`` runs the final sync and flush and answers the flush report; the runner
#: calls it after the session ends and before the item is stopped.
SIDECAR_PORT: Final = env.METRICS_PORT
#: The memory stores the sidecar mounted, as the ``MEMSYNC_STORES`` JSON (mount path and access per store):
#: the runner's file tools are confined to these folders, and the read-only ones refuse writes.
STORES: Final = env.STORES

#: The sidecar's endpoint for that request (``POST``; the answer is the termination report as JSON, with
#: ``complete`` true when every changed file was saved).
FINAL_PATH: Final = "/final"

#: The key, in the per-item Secret the operator creates, that holds the work item's secret.
SECRET_KEY: Final = "secret"  # noqa: S105 - a key name, not a secret

ALL: Final = (WORK_ID, ENVIRONMENT_ID, SESSION_ID, WORK_SECRET, BASE_URL, SIDECAR_PORT, STORES)
