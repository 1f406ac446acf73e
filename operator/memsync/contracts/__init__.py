"""The contracts between memsync's processes, each defined once and used by both sides.

- ``env``: the environment the operator gives the two memsync containers of a sandbox Pod, and the stores
  JSON (``MEMSYNC_STORES``).
- ``report``: the one-line JSON termination report the sync agent writes and the operator reads.
- ``health``: the JSON sync-health document the sync sidecar serves at ``/status`` and the operator polls.
"""
