"""The self-hosted memory store server (``memsync store serve``): FastAPI over SQLite or PostgreSQL.

The layer shows in the folder (``http/``, ``storage/``), the domain in the module or folder (``stores/``,
``environments/``, ``access``); ``app.create_app`` assembles them.
"""

from memsync.server.app import create_app

__all__ = ["create_app"]
