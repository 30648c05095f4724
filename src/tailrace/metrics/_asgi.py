"""Request metrics of the api-server: counts and durations by route template.

The route's path template (``/api/v1/dags/{dag_id}``), never the path itself, is the
label: ids in paths would make the series unbounded. A request no route matched (the UI's
static files, a 404) is counted under ``route="other"``.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tailrace import metrics


class RequestMetrics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        m = metrics.get()
        if scope["type"] != "http" or not m.enabled:
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "other"
            method = scope["method"]
            m.api_requests.labels(method, route, str(status)).inc()
            m.api_request_duration.labels(method, route).observe(time.perf_counter() - began)
