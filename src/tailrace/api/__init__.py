"""The REST API (FastAPI, under /api/v1) and the server that runs it."""

from tailrace.api._app import API_PREFIX, create_app
from tailrace.api._context import ApiContext
from tailrace.api._server import ApiServer
from tailrace.api.errors import ApiError, ApiServerError

__all__ = [  # noqa: RUF022 - grouped by concept
    # serving
    "API_PREFIX",
    "ApiContext",
    "ApiServer",
    "create_app",
    # errors
    "ApiError",
    "ApiServerError",
]
