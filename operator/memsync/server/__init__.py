"""The self-hosted memory store server (``memsync store serve``): FastAPI + SQLite."""

from memsync.server.app import create_app

__all__ = ["create_app"]
