"""The async store client for the memory store API (docs/store-api.md).

``from memsync.client import StoreClient, errors``.
"""

from memsync.client import errors
from memsync.client.client import StoreClient

__all__ = ["StoreClient", "errors"]
