"""Request metrics of the api-server: counts and durations by route template.

The route's path template (``/api/v1/dags/{dag_id}``), never the path itself, is the
label: ids in paths would make the series unbounded. A request no API route matched (the
UI's static files, an unknown path) is counted under ``route="other"``.
"""

from __future__ import annotations

import time

from starlette.routing import BaseRoute, Mount
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
            route = route_template(scope)
            method = scope["method"]
            m.api_requests.labels(method, route, str(status)).inc()
            m.api_request_duration.labels(method, route).observe(time.perf_counter() - began)


def route_template(scope: Scope) -> str:
    """The matched route's full path template: the path with each parameter's segment
    put back as ``{name}`` (FastAPI's route object knows its path without the prefix it
    was included under)."""
    route = scope.get("route")
    if not isinstance(route, BaseRoute) or isinstance(route, Mount):
        return "other"
    params = scope.get("path_params") or {}
    names = {str(value): name for name, value in params.items()}
    segments = [f"{{{names[s]}}}" if s in names else s for s in scope["path"].split("/")]
    if len({s for s in segments if s.startswith("{")}) < len(params):
        # A parameter spanning segments: the route's own template, bounded if shorter.
        return str(getattr(route, "path", "other"))
    return "/".join(segments)
