"""The FastAPI application: routes under /api/v1, one error body, the UI's static root."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from anyio import to_thread
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from starlette.exceptions import HTTPException

from tailrace.api import _docs, execution, models, routes
from tailrace.api._auth import current_user
from tailrace.api._context import ApiContext
from tailrace.api._headers import SecurityHeaders
from tailrace.api._json import InvalidJson, field_name, plain_message
from tailrace.api._limits import BodyLimit
from tailrace.api.errors import ApiError, NotFound
from tailrace.errors import (
    AssetEventTooLargeError,
    AssetNotFoundError,
    BackfillCompletedError,
    BackfillError,
    BackfillNotFoundError,
    BackfillRunningError,
    ConfTooLargeError,
    ConfValidationError,
    ConnectionExistsError,
    DagNotFoundError,
    InvalidConnectionUriError,
    ReplayError,
    RunExistsError,
    RunNotFoundError,
    UserExistsError,
)
from tailrace.metrics._asgi import RequestMetrics
from tailrace.sdk.errors import TailraceError

log = logging.getLogger(__name__)

API_PREFIX = "/api/v1"
AIRFLOW_PREFIX = "/api/v2"
STATIC_DIR = Path(__file__).parent / "static"

_STATUS_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    422: "validation_error",
    429: "too_many_requests",
}
# Domain errors, raised by the functions the CLI shares, as HTTP answers.
_DOMAIN_ERRORS: dict[type[TailraceError], tuple[int, str]] = {
    DagNotFoundError: (404, "dag_not_found"),
    RunNotFoundError: (404, "run_not_found"),
    RunExistsError: (409, "run_exists"),
    UserExistsError: (409, "user_exists"),
    ConnectionExistsError: (409, "conflict"),
    ConfValidationError: (422, "invalid_conf"),
    ConfTooLargeError: (413, "conf_too_large"),
    InvalidConnectionUriError: (422, "invalid_uri"),
    ReplayError: (422, "cannot_replay"),
    AssetNotFoundError: (404, "asset_not_found"),
    AssetEventTooLargeError: (413, "extra_too_large"),
    BackfillError: (422, "invalid_backfill"),
    BackfillRunningError: (409, "backfill_running"),
    BackfillNotFoundError: (404, "backfill_not_found"),
    BackfillCompletedError: (409, "backfill_completed"),
}


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": models.ErrorBody, "description": _STATUS_CODES[code]} for code in codes}


READ_ERRORS = _responses(400, 401, 404, 422)
AUTH_ERRORS = _responses(400, 401, 404, 413, 422, 429)
WRITE_ERRORS = _responses(400, 401, 403, 404, 409, 413, 422)


def error_response(
    status: int, code: str, message: str, detail: Any = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = models.ErrorBody(error=models.ErrorInfo(code=code, message=message, detail=detail))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def create_app(ctx: ApiContext) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Plain-function handlers run on threads. anyio's 40 at once contend for the
        # interpreter lock with the loop's thread, which reads requests and writes
        # answers, and overflow the database pool; a few serve more requests a second,
        # first come first served. The limiter is per event loop: set here, on the
        # server's own.
        to_thread.current_default_thread_limiter().total_tokens = ctx.settings.api_threads
        yield

    app = FastAPI(
        lifespan=lifespan,
        title="Tailrace",
        version="1",
        summary="REST API of the Tailrace workflow orchestrator.",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,  # served from local files: _docs
        redoc_url=None,
    )
    app.add_middleware(BodyLimit, max_bytes=ctx.settings.api_max_request_bytes)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(RequestMetrics)
    app.state.tailrace = ctx
    # Remote workers' reports: authenticated by per-try tokens, not users (ADR 0009). First:
    # routes are matched in order, and a try's two requests should not walk the REST API's.
    execution.install(app)
    app.include_router(routes.auth.router, prefix=API_PREFIX, responses=AUTH_ERRORS)
    authenticated = [Depends(current_user)]
    for router in routes.AUTHENTICATED:
        app.include_router(
            router, prefix=API_PREFIX, dependencies=authenticated, responses=WRITE_ERRORS
        )
    # Airflow 3's paths for backfills and HITL, so an Airflow client's calls work as they are.
    for router in (routes.backfills.router, routes.hitl.router):
        app.include_router(
            router, prefix=AIRFLOW_PREFIX, dependencies=authenticated, include_in_schema=False
        )
    _add_error_handlers(app)
    _install_metrics(app, ctx)
    _docs.install(app, f"{API_PREFIX}/openapi.json")
    # The web UI will live here; until then a page pointing at the API's documentation.
    app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="ui")
    return app


def _install_metrics(app: FastAPI, ctx: ApiContext) -> None:
    """Prometheus' scrape target: every process of this component (ADR 0021). Like the
    health check it needs no login: it names DAGs and tasks, never runs or data."""
    from tailrace import metrics
    from tailrace.metrics._collect import StreamCollector

    collectors = [StreamCollector(ctx.readonly)]

    @app.get("/metrics", include_in_schema=False)
    def serve_metrics() -> Response:
        where = metrics.directory()
        if where is None:
            raise NotFound(
                "metrics are off here (metrics_enabled = false); set TAILRACE_METRICS_ENABLED"
                "=true and restart to serve them",
                code="metrics_disabled",
            )
        return Response(metrics.render(where, collectors), media_type=metrics.CONTENT_TYPE)


def _add_error_handlers(app: FastAPI) -> None:
    async def api_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(exc.status_code, exc.code, exc.message, exc.detail, exc.headers)

    async def domain_error(_request: Request, exc: Exception) -> JSONResponse:
        for kind, (status, code) in _DOMAIN_ERRORS.items():
            if isinstance(exc, kind):
                return error_response(status, code, str(exc))
        return error_response(400, "bad_request", str(exc))

    async def http_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = _STATUS_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return error_response(
            exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None)
        )

    async def validation_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        # Only the parts that are always JSON: a rejected input may be anything.
        detail = [
            {
                "loc": list(e.get("loc", ())),
                "field": field_name(e.get("loc", ())),
                "msg": plain_message(e),
                "type": e.get("type"),
            }
            for e in exc.errors()
        ]
        message = "; ".join(f"{d['field']}: {d['msg']}" for d in detail)
        return error_response(422, "validation_error", f"invalid request: {message}", detail)

    async def invalid_json(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, InvalidJson)
        detail = [
            {"loc": exc.loc, "field": field_name(exc.loc), "msg": exc.message, "type": exc.kind}
        ]
        return error_response(422, "validation_error", f"invalid request: {exc.detail}", detail)

    async def data_error(_request: Request, exc: Exception) -> JSONResponse:
        log.info("the database rejected a value: %s", exc)
        return error_response(400, "invalid_value", "the database cannot store or compare a value")

    async def database_unavailable(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, DBAPIError)
        # A lost or refused connection; anything else the database refuses is a bug.
        if not (exc.connection_invalidated or isinstance(exc, OperationalError)):
            return await internal_error(_request, exc)
        log.warning("the database went away: %s", exc.orig)
        # Clients (workers above all) retry a 503: the report is not lost.
        return error_response(
            503,
            "database_unavailable",
            "the database is unavailable (restarting?); retry shortly",
            headers={"Retry-After": "1"},
        )

    async def internal_error(_request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error in the API", exc_info=exc)
        return error_response(500, "internal_error", "internal server error; see the server log")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(TailraceError, domain_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(InvalidJson, invalid_json)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(DataError, data_error)
    app.add_exception_handler(DBAPIError, database_unavailable)
    app.add_exception_handler(Exception, internal_error)
