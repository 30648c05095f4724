"""The REST API (FastAPI, under /api/v1) and the server that runs it.

The names load when first used: a process that only binds the API's socket or names its
errors (standalone's parent, which hands the serving to a child) imports no web framework.
"""

from typing import TYPE_CHECKING, Any

from tailrace.api.errors import ApiError, ApiServerError

if TYPE_CHECKING:
    from tailrace.api._app import API_PREFIX, create_app
    from tailrace.api._context import ApiContext
    from tailrace.api._server import ApiServer

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

_LAZY = {
    "API_PREFIX": "tailrace.api._app",
    "create_app": "tailrace.api._app",
    "ApiContext": "tailrace.api._context",
    "ApiServer": "tailrace.api._server",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tailrace.api' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
