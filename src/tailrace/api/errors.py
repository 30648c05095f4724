"""Errors the API answers with: an HTTP status, a stable code, a message and detail."""

from __future__ import annotations

from typing import Any

from tailrace.sdk.errors import TailraceError


class ApiServerError(TailraceError):
    """The API server could not start (its address is taken, say)."""


class ApiError(TailraceError):
    """An answer to a request: HTTP status, stable ``code``, message and detail."""

    status_code = 400
    code = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        detail: Any = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.headers = headers
        if code is not None:
            self.code = code


class BadRequest(ApiError):
    pass


class NotAuthenticated(ApiError):
    status_code = 401
    code = "not_authenticated"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(ApiError):
    status_code = 403
    code = "forbidden"


class NotFound(ApiError):
    status_code = 404
    code = "not_found"


class Conflict(ApiError):
    status_code = 409
    code = "conflict"


class PayloadTooLarge(ApiError):
    status_code = 413
    code = "payload_too_large"


class TooManyRequests(ApiError):
    status_code = 429
    code = "too_many_requests"


class Unprocessable(ApiError):
    status_code = 422
    code = "validation_error"
