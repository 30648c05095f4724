"""HttpHook: httpx clients (sync and async) for a connection, with retries on 429 and 5xx."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from tailrace.providers.errors import HttpError
from tailrace.sdk.connections import (
    Connection,
    aget_connection,
    get_connection,
    mask_secret,
    mask_url,
    redact,
)

log = logging.getLogger("tailrace.providers.http")
# httpx logs every request at INFO with the full URL: our own lines say more, once.
logging.getLogger("httpx").setLevel(logging.WARNING)

RETRYABLE_STATUSES: frozenset[int] = frozenset({429, 500, 502, 503, 504})
BODY_EXCERPT = 500
AuthType = Literal["basic", "bearer", "none"]


@dataclass(frozen=True)
class _Target:
    base_url: str
    auth: httpx.Auth | None
    headers: dict[str, str]


def body_excerpt(response: httpx.Response, limit: int = BODY_EXCERPT) -> str:
    try:
        text = response.text
    except Exception:  # an undecodable body: say so rather than fail while failing
        return f"<{len(response.content)} bytes>"
    text = " ".join(text.split())
    return redact(text[:limit] + ("…" if len(text) > limit else ""))


def retry_after_seconds(response: httpx.Response, now: datetime | None = None) -> float | None:
    """The response's ``Retry-After`` in seconds (delta-seconds or an HTTP date), if any."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


_tracer = trace.get_tracer("tailrace.providers.http")


def _answered(span: Span | None, response: httpx.Response, retries: int) -> None:
    if span is not None and span.is_recording():
        span.set_attribute("http.response.status_code", response.status_code)
        span.set_attribute("http.request.resend_count", retries)
        if response.status_code >= 400:
            span.set_status(Status(StatusCode.ERROR, f"HTTP {response.status_code}"))


class HttpHook:
    """Talks HTTP to the connection ``http_conn_id`` (or to ``base_url``), on httpx.

    The connection URI gives the base URL and the credentials:
    ``https://login:password@host/base`` is basic auth, ``https://:token@host`` (no login)
    a bearer token; ``?auth_type=basic|bearer|none`` (or the ``auth_type`` argument)
    forces one. Clients pool connections (``max_connections``) and time out after
    ``timeout`` seconds. A 429 or 5xx response, or a transport error, is retried up to
    ``max_retries`` times with exponential backoff (``retry_backoff`` doubling, at most
    ``max_retry_wait``) that honours ``Retry-After``. Any other 4xx raises
    :class:`~tailrace.providers.errors.HttpError` at once, with the status, the URL
    (credentials masked) and an excerpt of the body. With tracing on, each request (its
    retries included) is an OpenTelemetry client span, a child of the task's or trigger's
    span; ``trace=False`` makes none.
    """

    def __init__(
        self,
        http_conn_id: str | None = "http_default",
        *,
        base_url: str | None = None,
        auth_type: AuthType | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        max_retries: int = 5,
        retry_backoff: float = 0.5,
        max_retry_wait: float = 60.0,
        max_connections: int = 10,
        logger: logging.Logger | None = None,
        trace: bool = True,
    ) -> None:
        if http_conn_id is None and base_url is None:
            raise ValueError("HttpHook needs an http_conn_id or a base_url")
        self.http_conn_id = http_conn_id
        self.base_url = base_url
        self.auth_type = auth_type
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.retry_backoff = retry_backoff
        self.max_retry_wait = max_retry_wait
        self.max_connections = max_connections
        self.log = logger or log
        self.trace = trace

    # -- where to, and as whom ------------------------------------------------------------

    def _target(self, conn: Connection | None) -> _Target:
        if conn is None:
            assert self.base_url is not None
            return _Target(self.base_url, None, dict(self.headers))
        base_url = self.base_url or conn.base_url()
        auth_type = self.auth_type or conn.extra.get("auth_type")
        if auth_type is None:
            auth_type = "basic" if conn.login else ("bearer" if conn.password else "none")
        headers = dict(self.headers)
        auth: httpx.Auth | None = None
        if auth_type == "basic":
            auth = httpx.BasicAuth(conn.login or "", conn.password or "")
        elif auth_type == "bearer":
            token = conn.password or conn.extra.get("token", "")
            mask_secret(token)
            headers["Authorization"] = f"Bearer {token}"
        elif auth_type != "none":
            raise ValueError(
                f"connection {conn.conn_id!r}: auth_type {auth_type!r} is not one of "
                "basic, bearer, none"
            )
        return _Target(base_url, auth, headers)

    def _client_kwargs(self, target: _Target) -> dict[str, Any]:
        return {
            "base_url": target.base_url,
            "auth": target.auth,
            "headers": target.headers,
            "timeout": self.timeout,
            "limits": httpx.Limits(max_connections=self.max_connections),
            "follow_redirects": True,
        }

    @contextmanager
    def client(self) -> Iterator[httpx.Client]:
        """A pooled synchronous client for the connection."""
        conn = get_connection(self.http_conn_id) if self.http_conn_id else None
        with httpx.Client(**self._client_kwargs(self._target(conn))) as client:
            yield client

    @asynccontextmanager
    async def async_client(self) -> AsyncIterator[httpx.AsyncClient]:
        """A pooled asynchronous client for the connection (for triggers)."""
        conn = await aget_connection(self.http_conn_id) if self.http_conn_id else None
        async with httpx.AsyncClient(**self._client_kwargs(self._target(conn))) as client:
            yield client

    # -- requests with retries ------------------------------------------------------------

    def run(
        self,
        endpoint: str = "",
        method: str = "GET",
        *,
        client: httpx.Client | None = None,
        check_response: bool = True,
        **request: Any,
    ) -> httpx.Response:
        """Send one request (``params=``, ``json=``, ``data=``, ``headers=`` as httpx takes
        them), retrying as the class says; blocking."""
        if client is None:
            with self.client() as own:
                return self.run(
                    endpoint, method, client=own, check_response=check_response, **request
                )
        attempt = 0
        with self._span(method, endpoint, client.base_url) as span:
            while True:
                try:
                    response: httpx.Response | None = client.request(method, endpoint, **request)
                    error: Exception | None = None
                except httpx.TransportError as exc:
                    response, error = None, exc
                wait = self._next_wait(method, endpoint, client.base_url, attempt, response, error)
                if wait is None:
                    assert response is not None
                    _answered(span, response, attempt)
                    return self._checked(method, response, check_response)
                attempt += 1
                time.sleep(wait)

    async def arun(
        self,
        endpoint: str = "",
        method: str = "GET",
        *,
        client: httpx.AsyncClient | None = None,
        check_response: bool = True,
        **request: Any,
    ) -> httpx.Response:
        """:meth:`run` for the event loop: waits between retries with ``asyncio.sleep``."""
        if client is None:
            async with self.async_client() as own:
                return await self.arun(
                    endpoint, method, client=own, check_response=check_response, **request
                )
        attempt = 0
        with self._span(method, endpoint, client.base_url) as span:
            while True:
                try:
                    response: httpx.Response | None = await client.request(
                        method, endpoint, **request
                    )
                    error: Exception | None = None
                except httpx.TransportError as exc:
                    response, error = None, exc
                wait = self._next_wait(method, endpoint, client.base_url, attempt, response, error)
                if wait is None:
                    assert response is not None
                    _answered(span, response, attempt)
                    return self._checked(method, response, check_response)
                attempt += 1
                await asyncio.sleep(wait)

    @contextmanager
    def _span(self, method: str, endpoint: str, base_url: httpx.URL) -> Iterator[Span | None]:
        """A client span per request (a page fetched, say); none unless tracing is on."""
        if not self.trace:
            yield None
            return
        url = mask_url(str(base_url.join(endpoint)))
        with _tracer.start_as_current_span(
            f"HTTP {method}",
            kind=SpanKind.CLIENT,
            attributes={"http.request.method": method, "url.full": url},
        ) as span:
            yield span

    def backoff(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds to wait before retry ``attempt + 1`` (0-based ``attempt``)."""
        retry_after = retry_after_seconds(response) if response is not None else None
        if retry_after is not None:
            return min(retry_after, self.max_retry_wait)
        return float(min(self.retry_backoff * 2**attempt, self.max_retry_wait))

    def _next_wait(
        self,
        method: str,
        endpoint: str,
        base_url: httpx.URL,
        attempt: int,
        response: httpx.Response | None,
        error: Exception | None,
    ) -> float | None:
        """None: use this response. Otherwise how long to wait before the next try."""
        if response is not None and response.status_code not in RETRYABLE_STATUSES:
            return None
        url = mask_url(
            str(response.request.url if response is not None else base_url.join(endpoint))
        )
        if attempt >= self.max_retries:
            if response is not None:
                return None  # _checked raises with the status and body
            raise HttpError(
                method=method,
                url=url,
                status=None,
                reason=f"{type(error).__name__}: {redact(str(error))}; "
                f"gave up after {attempt + 1} attempts",
            ) from error
        wait = self.backoff(attempt, response)
        what = f"returned {response.status_code}" if response is not None else f"failed ({error!r})"
        self.log.warning(
            "%s %s %s; retrying in %.3gs (retry %d of %d)",
            method,
            url,
            redact(what),
            wait,
            attempt + 1,
            self.max_retries,
        )
        return wait

    def _checked(self, method: str, response: httpx.Response, check: bool) -> httpx.Response:
        if check:
            self.raise_for_status(method, response)
        return response

    def raise_for_status(self, method: str, response: httpx.Response) -> None:
        """:class:`HttpError` (status, masked URL, body excerpt) for an error status."""
        if response.is_error:
            reason = ""
            if response.status_code in RETRYABLE_STATUSES:
                reason = f"gave up after {self.max_retries + 1} attempts"
            raise HttpError(
                method=method,
                url=mask_url(str(response.request.url)),
                status=response.status_code,
                body=body_excerpt(response),
                reason=reason,
            )
