"""HTTP triggers: one request, polling until a URL answers, and a whole paginated API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

import httpx

from tailrace.providers.http._hook import HttpHook, body_excerpt
from tailrace.providers.http._pagination import Pagination, page_body, page_items
from tailrace.sdk.connections import mask_url
from tailrace.sdk.triggers import BaseTrigger, TriggerEvent

PayloadMode = Literal["items", "page", "body"]
HOOK_OPTIONS = frozenset(
    {"auth_type", "headers", "timeout", "max_retries", "retry_backoff", "max_retry_wait"}
)


def make_hook(
    http_conn_id: str | None, base_url: str | None, options: Mapping[str, Any] | None, owner: Any
) -> HttpHook:
    """The hook of an operator, sensor or trigger, logging to ``owner.log``."""
    options = dict(options or {})
    unknown = set(options) - HOOK_OPTIONS
    if unknown:
        raise ValueError(f"unknown hook options {sorted(unknown)}; use {sorted(HOOK_OPTIONS)}")
    return HttpHook(http_conn_id, base_url=base_url, logger=owner.log, **options)


def request_kwargs(headers: dict[str, str] | None, json: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"headers": headers}
    if json is not None:
        request["json"] = json
    return request


def response_payload(response: httpx.Response) -> dict[str, Any]:
    """A response as a JSON-safe event payload (rebuilt by :func:`rebuild_response`)."""
    return {
        "status_code": response.status_code,
        "url": mask_url(str(response.request.url)),
        "method": response.request.method,
        "headers": dict(response.headers),
        "text": response.text,
    }


def rebuild_response(payload: Mapping[str, Any]) -> httpx.Response:
    return httpx.Response(
        payload["status_code"],
        headers=payload.get("headers") or {},
        content=str(payload.get("text", "")).encode(),
        request=httpx.Request(payload.get("method", "GET"), payload.get("url", "http://unknown")),
    )


class _HttpTriggerBase(BaseTrigger):
    def __init__(
        self,
        endpoint: str = "",
        *,
        http_conn_id: str | None = "http_default",
        base_url: str | None = None,
        method: str = "GET",
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        json: Any = None,
        hook_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.http_conn_id = http_conn_id
        self.base_url = base_url
        self.method = method.upper()
        self.params = dict(params or {})
        self.headers = dict(headers or {})
        self.json = json
        self.hook_options = dict(hook_options or {})

    def _common(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "http_conn_id": self.http_conn_id,
            "base_url": self.base_url,
            "method": self.method,
            "params": self.params,
            "headers": self.headers,
            "json": self.json,
            "hook_options": self.hook_options,
        }

    def _hook(self) -> HttpHook:
        return make_hook(self.http_conn_id, self.base_url, self.hook_options, self)

    def _request(self) -> dict[str, Any]:
        return request_kwargs(self.headers, self.json)


class HttpTrigger(_HttpTriggerBase):
    """Sends one request (with the hook's retries) and fires with the response:
    ``{"status_code", "url", "method", "headers", "text"}``. A status that is an error
    after retries fails the task with :class:`~tailrace.providers.errors.HttpError`."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "tailrace.providers.http.HttpTrigger", self._common()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        response = await self._hook().arun(
            self.endpoint, self.method, params=self.params, **self._request()
        )
        self.log.info(
            "%s %s returned %d", self.method, mask_url(str(response.url)), response.status_code
        )
        yield TriggerEvent(response_payload(response))


class HttpSensorTrigger(_HttpTriggerBase):
    """Polls until the endpoint answers with a success status (2xx/3xx).

    A status in ``waiting_statuses`` (404 by default) means "not yet": the trigger logs
    it (``poke 3: GET ... returned 404, waiting 5 s``) and tries again after
    ``poke_interval`` seconds. Any other error status fails the task.
    """

    def __init__(
        self,
        endpoint: str = "",
        *,
        poke_interval: float = 5.0,
        waiting_statuses: list[int] | None = None,
        poke_count: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(endpoint, **kwargs)
        self.poke_interval = float(poke_interval)
        self.waiting_statuses = list(waiting_statuses or [404])
        self.poke_count = poke_count

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "tailrace.providers.http.HttpSensorTrigger", {
            **self._common(),
            "poke_interval": self.poke_interval,
            "waiting_statuses": self.waiting_statuses,
            "poke_count": self.poke_count,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self._hook()
        poke = self.poke_count
        async with hook.async_client() as client:
            while True:
                poke += 1
                response = await hook.arun(
                    self.endpoint,
                    self.method,
                    client=client,
                    check_response=False,
                    params=self.params,
                    **self._request(),
                )
                url = mask_url(str(response.request.url))
                if response.status_code not in self.waiting_statuses:
                    hook.raise_for_status(self.method, response)
                    self.log.info(
                        "poke %d: %s %s returned %d; done",
                        poke,
                        self.method,
                        url,
                        response.status_code,
                    )
                    yield TriggerEvent({**response_payload(response), "poke_count": poke})
                    return
                self.log.info(
                    "poke %d: %s %s returned %d, waiting %g s",
                    poke,
                    self.method,
                    url,
                    response.status_code,
                    self.poke_interval,
                )
                await asyncio.sleep(self.poke_interval)


class HttpPaginationTrigger(_HttpTriggerBase):
    """Pages through an API and streams one event per page, in order.

    ``pagination`` says how to find the next page (see
    :class:`~tailrace.providers.http.Pagination`: ``"link"``, ``"odata"``, a cursor at a
    JSON path, page or offset numbers ...), ``items_path`` where a page's items are
    (``"value"``, ``"items"``, ``"data.results"``; ``None``: the body is the list).
    Each event's payload is, per ``payload``: ``"items"`` the page's items (default),
    ``"page"`` ``{"page": n, "url": ..., "items": [...]}``, or ``"body"`` the whole JSON.
    Each event's checkpoint is the next request, so after a triggerer dies another one
    continues from the next page without fetching earlier pages again. ``max_pages``
    stops early; an empty last page (how page and offset numbering end) is not an event.
    A page that is not JSON or has no items at ``items_path`` fails the task
    naming the page and the path.
    """

    def __init__(
        self,
        endpoint: str = "",
        *,
        pagination: dict[str, Any] | str | None = "link",
        items_path: str | None = None,
        payload: PayloadMode = "items",
        max_pages: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(endpoint, **kwargs)
        self.pagination = pagination
        self.strategy = Pagination.of(pagination)
        self.items_path = items_path
        if payload not in ("items", "page", "body"):
            raise ValueError(f"payload must be 'items', 'page' or 'body', not {payload!r}")
        self.payload: PayloadMode = payload
        self.max_pages = max_pages

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "tailrace.providers.http.HttpPaginationTrigger", {
            **self._common(),
            "pagination": self.pagination,
            "items_path": self.items_path,
            "payload": self.payload,
            "max_pages": self.max_pages,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        request: dict[str, Any] | None = self.strategy.first_request(self.endpoint, self.params)
        page = 0
        if self.checkpoint:
            request, page = self.checkpoint["next"], int(self.checkpoint["page"])
            if request is None:
                return
            self.log.info("resuming at page %d: %s", page, mask_url(request["url"]))
        hook = self._hook()
        async with hook.async_client() as client:
            while request is not None:
                response = await hook.arun(
                    request["url"],
                    self.method,
                    client=client,
                    params=request["params"] or None,
                    **self._request(),
                )
                url = mask_url(str(response.request.url))
                body = page_body(response, page)
                items = page_items(body, self.items_path, page, url)
                following = self.strategy.next_request(request, response, body, items)
                if self.max_pages is not None and page + 1 >= self.max_pages:
                    following = None
                self.log.info("page %d: %d items from %s", page, len(items), url)
                if not items and following is None and page > 0:
                    return  # the empty page that ends page/offset pagination is no page
                yield TriggerEvent(
                    self._payload(page, url, body, items),
                    checkpoint={"next": following, "page": page + 1},
                )
                request, page = following, page + 1

    def _payload(self, page: int, url: str, body: Any, items: list[Any]) -> Any:
        if self.payload == "items":
            return items
        if self.payload == "page":
            return {"page": page, "url": url, "items": items}
        return body


__all__ = [
    "HttpPaginationTrigger",
    "HttpSensorTrigger",
    "HttpTrigger",
    "body_excerpt",
    "rebuild_response",
    "response_payload",
]
