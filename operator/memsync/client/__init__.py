"""The async store client for the memory store API (reference §1).

``from memsync.client import StoreClient, errors``.
"""

from memsync.client import errors
from memsync.client.client import StoreClient

__all__ = ["StoreClient", "errors"]
