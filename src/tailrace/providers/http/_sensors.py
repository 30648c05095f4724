"""HttpSensor: waits until an endpoint answers (and, optionally, says what you want)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from tailrace.providers.http._hook import AuthType
from tailrace.providers.http._operators import _hook_options, default_result
from tailrace.providers.http._triggers import HttpSensorTrigger, make_hook, rebuild_response
from tailrace.sdk.connections import mask_url
from tailrace.sdk.sensors import BaseSensorOperator

if TYPE_CHECKING:
    from tailrace.sdk._context import Context


class HttpSensor(BaseSensorOperator):
    """Pokes ``endpoint`` until it answers with a status not in ``waiting_statuses``
    (404 by default) and, when given, ``response_check(response)`` is True; returns the
    response's JSON (or text). Any other error status fails the task.

    Each poke is logged: ``poke 3: GET https://... returned 404, waiting 5 s``.
    ``deferrable=True`` (or :class:`HttpSensorAsync`) polls from the triggerer, holding
    no worker slot; ``response_check`` then runs on a worker when an answer arrives, and
    the sensor waits again if it is False.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("endpoint", "query", "headers")

    def __init__(
        self,
        *,
        endpoint: str = "",
        method: str = "GET",
        http_conn_id: str | None = "http_default",
        base_url: str | None = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        response_check: Callable[[httpx.Response], bool] | None = None,
        waiting_statuses: list[int] | None = None,
        auth_type: AuthType | None = None,
        request_timeout: float = 30.0,
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
        self.headers = headers
        self.response_check = response_check
        self.waiting_statuses = list(waiting_statuses or [404])
        self.hook_options = _hook_options(
            auth_type, request_timeout, max_retries, retry_backoff, max_retry_wait
        )
        self._pokes = 0
        self._result: Any = None

    def poke(self, context: Context) -> bool:
        hook = make_hook(self.http_conn_id, self.base_url, self.hook_options, self)
        response = hook.run(
            self.endpoint,
            self.method,
            check_response=False,
            params=self.query,
            headers=self.headers,
        )
        self._pokes += 1
        url = mask_url(str(response.request.url))
        if response.status_code in self.waiting_statuses:
            self.log.info(
                "poke %d: %s %s returned %d, waiting %g s",
                self._pokes,
                self.method,
                url,
                response.status_code,
                self.poke_interval,
            )
            return False
        hook.raise_for_status(self.method, response)
        return self._accept(response)

    def _accept(self, response: httpx.Response) -> bool:
        if self.response_check is not None and not self.response_check(response):
            self.log.info(
                "poke %d: %s %s returned %d but response_check is False, waiting %g s",
                self._pokes,
                self.method,
                mask_url(str(response.request.url)),
                response.status_code,
                self.poke_interval,
            )
            return False
        self._result = default_result(response)
        return True

    def execute(self, context: Context, *args: Any, **kwargs: Any) -> Any:
        done = super().execute(context, *args, **kwargs)
        return self._result if done is None else done

    def deferral_trigger(self, context: Context, poke_count: int = 0) -> HttpSensorTrigger:
        return HttpSensorTrigger(
            self.endpoint,
            http_conn_id=self.http_conn_id,
            base_url=self.base_url,
            method=self.method,
            params=self.query,
            headers=self.headers,
            hook_options=self.hook_options,
            poke_interval=self.poke_interval,
            waiting_statuses=self.waiting_statuses,
            poke_count=poke_count,
        )

    def deferral_timeout(self) -> timedelta:
        return timedelta(seconds=self.timeout)

    def execute_complete(self, context: Context, event: Any = None) -> Any:
        """Resumes with the answer the trigger got; waits again if ``response_check``
        rejects it."""
        self._pokes = int(event.get("poke_count", 0))
        if self._accept(rebuild_response(event)):
            return self._result
        self.defer(
            trigger=self.deferral_trigger(context, poke_count=self._pokes),
            method_name="execute_complete",
            timeout=self.deferral_timeout(),
            timeout_outcome="skipped" if self.soft_fail else "failed_no_retry",
        )


class HttpSensorAsync(HttpSensor):
    """:class:`HttpSensor` that always polls from the triggerer, freeing its worker slot."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["deferrable"] = True
        super().__init__(**kwargs)
