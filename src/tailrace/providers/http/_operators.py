"""HttpOperator (one request, in a worker or deferred) and PaginatedHttpOperator (a whole
paginated API streamed from the triggerer)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from tailrace.providers.http._hook import AuthType
from tailrace.providers.http._triggers import (
    HttpPaginationTrigger,
    HttpTrigger,
    PayloadMode,
    make_hook,
    rebuild_response,
    request_kwargs,
)
from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._types import as_timedelta
from tailrace.sdk.connections import mask_url
from tailrace.sdk.errors import FailTask
from tailrace.sdk.triggers import StartTriggerArgs

if TYPE_CHECKING:
    from tailrace.sdk._context import Context


def _hook_options(
    auth_type: AuthType | None,
    timeout: float,
    max_retries: int,
    retry_backoff: float,
    max_retry_wait: float,
) -> dict[str, Any]:
    options: dict[str, Any] = {
        "timeout": timeout,
        "max_retries": max_retries,
        "retry_backoff": retry_backoff,
        "max_retry_wait": max_retry_wait,
    }
    if auth_type is not None:
        options["auth_type"] = auth_type
    return options


def default_result(response: httpx.Response) -> Any:
    """The parsed JSON of a JSON response, else its text."""
    if "json" in response.headers.get("content-type", ""):
        return response.json()
    return response.text


class HttpOperator(BaseOperator):
    """Sends one HTTP request to ``endpoint`` of the connection ``http_conn_id``.

    Returns the response's JSON (its text when it is not JSON), or what
    ``response_filter(response)`` returns; ``response_check(response)`` returning False
    fails the task. A 429 or 5xx is retried with backoff (see
    :class:`~tailrace.providers.http.HttpHook`); another 4xx fails the task with the
    status, the URL (credentials masked) and an excerpt of the body.
    ``deferrable=True`` sends the request from the triggerer instead, holding no worker
    slot while it waits; the checks and the filter then run when the task resumes.
    ``endpoint``, ``query`` (the query parameters), ``json`` and ``headers`` are templated.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("endpoint", "query", "json", "headers")
    ui_color = "#f4a460"

    def __init__(
        self,
        *,
        endpoint: str = "",
        method: str = "GET",
        http_conn_id: str | None = "http_default",
        base_url: str | None = None,
        query: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
        response_check: Callable[[httpx.Response], bool] | None = None,
        response_filter: Callable[[httpx.Response], Any] | None = None,
        deferrable: bool = False,
        auth_type: AuthType | None = None,
        timeout: float = 30.0,
        max_retries: int = 5,
        retry_backoff: float = 0.5,
        max_retry_wait: float = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.endpoint = endpoint
        self.method = method.upper()
        self.http_conn_id = http_conn_id
        self.base_url = base_url
        self.query = query
        self.json = json
        self.headers = headers
        self.response_check = response_check
        self.response_filter = response_filter
        self.deferrable = deferrable
        self.hook_options = _hook_options(
            auth_type, timeout, max_retries, retry_backoff, max_retry_wait
        )

    def execute(self, context: Context) -> Any:
        if self.deferrable:
            self.defer(
                trigger=HttpTrigger(
                    self.endpoint,
                    http_conn_id=self.http_conn_id,
                    base_url=self.base_url,
                    method=self.method,
                    params=self.query,
                    headers=self.headers,
                    json=self.json,
                    hook_options=self.hook_options,
                ),
                method_name="execute_complete",
            )
        hook = make_hook(self.http_conn_id, self.base_url, self.hook_options, self)
        response = hook.run(
            self.endpoint, self.method, params=self.query, **request_kwargs(self.headers, self.json)
        )
        url = mask_url(str(response.request.url))
        self.log.info("%s %s returned %d", self.method, url, response.status_code)
        return self.process_response(response)

    def execute_complete(self, context: Context, event: Any = None) -> Any:
        """Resumes with the response the trigger fetched."""
        return self.process_response(rebuild_response(event))

    def process_response(self, response: httpx.Response) -> Any:
        if self.response_check is not None and not self.response_check(response):
            raise FailTask(
                f"response_check of task '{self.task_id}' returned False for "
                f"{response.request.method} {response.request.url} ({response.status_code})"
            )
        if self.response_filter is not None:
            return self.response_filter(response)
        return default_result(response)


class PaginatedHttpOperator(BaseOperator):
    """Streams every page of a paginated API into the task's output stream, one item per
    page, from the triggerer: the task starts there (``start_from_trigger``) and uses no
    worker at all.

    ``pagination`` (``"link"``, ``"odata"``, ``{"style": "cursor", "path": ...}``,
    ``{"style": "page"}`` ... see :class:`~tailrace.providers.http.Pagination`),
    ``items_path`` and ``payload`` are those of
    :class:`~tailrace.providers.http.HttpPaginationTrigger`. The trigger checkpoints the
    next request with every page, so a triggerer failover resumes mid-pagination.
    Arguments are fixed when the DAG is parsed (they are not templated). A subclass that
    defines ``handle_trigger_events(self, events, context)`` receives the pages in
    batches on a worker instead, and streams what it yields.
    """

    start_from_trigger = True
    ui_color = "#f4a460"

    def __init__(
        self,
        *,
        endpoint: str = "",
        pagination: dict[str, Any] | str | None = "link",
        items_path: str | None = None,
        payload: PayloadMode = "items",
        max_pages: int | None = None,
        method: str = "GET",
        http_conn_id: str | None = "http_default",
        base_url: str | None = None,
        query: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
        auth_type: AuthType | None = None,
        timeout: float = 30.0,
        max_retries: int = 5,
        retry_backoff: float = 0.5,
        max_retry_wait: float = 60.0,
        trigger_timeout: timedelta | float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.trigger = HttpPaginationTrigger(
            endpoint,
            pagination=pagination,
            items_path=items_path,
            payload=payload,
            max_pages=max_pages,
            http_conn_id=http_conn_id,
            base_url=base_url,
            method=method,
            params=query,
            headers=headers,
            json=json,
            hook_options=_hook_options(
                auth_type, timeout, max_retries, retry_backoff, max_retry_wait
            ),
        )
        classpath, trigger_kwargs = self.trigger.serialize()
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls=classpath,
            trigger_kwargs=trigger_kwargs,
            next_method=None,
            timeout=as_timedelta(trigger_timeout),
        )

    def execute(self, context: Context) -> list[Any]:
        """Only when run outside the scheduler (``tailrace tasks test``): every page's
        payload, fetched here."""

        async def pages() -> list[Any]:
            return [event.payload async for event in self.trigger.run()]

        return asyncio.run(pages())
