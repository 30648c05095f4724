"""The REST API (FastAPI, under /api/v1) and the server that runs it."""

from tailrace.api._app import API_PREFIX, create_app
from tailrace.api._context import ApiContext
from tailrace.api._server import ApiServer, ApiServerError

__all__ = ["API_PREFIX", "ApiContext", "ApiServer", "ApiServerError", "create_app"]
