"""A small paginated JSON API to try the HTTP provider against: ``tailrace demo-api``.

Orders with stable ids (order ``n`` is the same on every run), paginated in every style
the provider understands, with configurable latency and injected 429/500 errors:

| path | style | items at |
|---|---|---|
| ``/orders?page=1&page_size=10`` | page numbers, until an empty page | ``items`` |
| ``/orders/offset?offset=0&limit=10`` | offsets, until an empty page | ``items`` |
| ``/orders/link?page=1`` | RFC 8288 ``Link: <...>; rel="next"`` | the body (a list) |
| ``/orders/cursor?cursor=...`` | a cursor at ``meta.next_cursor`` | ``data.results`` |
| ``/orders/odata?$skip=0`` | ``@odata.nextLink`` | ``value`` |
| ``/eventually/{key}?after=3`` | 404 for the first 3 requests of ``key``, then 200 | |
| ``/status/{code}`` | answers ``code`` | |
| ``/stats`` | requests served per path and query (to check what was fetched) | |

With ``token`` set, every path but ``/stats`` needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["DemoApiConfig", "create_app", "order", "running_demo_api", "serve"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
CURRENCIES = ("EUR", "USD", "GBP")


@dataclass(frozen=True)
class DemoApiConfig:
    """``pages`` pages of ``page_size`` orders; ``latency`` seconds per response;
    ``error_rate`` the share of responses replaced by a 429 (with ``Retry-After``) or a
    500, drawn from a generator seeded with ``seed``."""

    page_size: int = 10
    pages: int = 5
    latency: float = 0.0
    error_rate: float = 0.0
    retry_after: int = 1
    seed: int = 0
    token: str | None = None

    @property
    def total(self) -> int:
        return self.page_size * self.pages


def order(n: int) -> dict[str, Any]:
    """Order number ``n`` (1-based): the same every time."""
    return {
        "id": n,
        "customer": f"customer-{n % 17:02d}",
        "amount": round(((n * 7919) % 10_000) / 100, 2),
        "currency": CURRENCIES[n % len(CURRENCIES)],
        "created_at": (EPOCH + timedelta(minutes=17 * n)).isoformat(),
    }


def _orders(offset: int, limit: int, total: int) -> list[dict[str, Any]]:
    return [order(n) for n in range(offset + 1, min(offset + limit, total) + 1)]


def _int(request: Request, name: str, default: int) -> int:
    try:
        return max(0, int(request.query_params.get(name, default)))
    except ValueError:
        return default


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def _decode_cursor(cursor: str) -> int:
    try:
        return int(base64.urlsafe_b64decode(cursor.encode()).decode().split(":", 1)[1])
    except (ValueError, IndexError):
        return -1


class _DemoApi:
    def __init__(self, config: DemoApiConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.served: Counter[str] = Counter()

    async def refusal(self, request: Request) -> Response | None:
        """Latency, auth and injected errors; None lets the request through."""
        config = self.config
        self.served[request.url.path + (f"?{request.url.query}" if request.url.query else "")] += 1
        if config.latency:
            await asyncio.sleep(config.latency)
        wanted = f"Bearer {config.token}"
        if config.token is not None and request.headers.get("authorization") != wanted:
            return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)
        if config.error_rate and self.rng.random() < config.error_rate:
            if self.rng.random() < 0.5:
                return JSONResponse(
                    {"error": "slow down"},
                    status_code=429,
                    headers={"Retry-After": str(config.retry_after)},
                )
            return JSONResponse({"error": "injected failure"}, status_code=500)
        return None

    def size(self, request: Request, name: str = "page_size") -> int:
        return max(1, _int(request, name, self.config.page_size))

    def by_page(self, request: Request) -> Response:
        page, size = max(1, _int(request, "page", 1)), self.size(request)
        items = _orders((page - 1) * size, size, self.config.total)
        return JSONResponse({"page": page, "page_size": size, "items": items})

    def by_offset(self, request: Request) -> Response:
        offset, limit = _int(request, "offset", 0), self.size(request, "limit")
        return JSONResponse({"offset": offset, "items": _orders(offset, limit, self.config.total)})

    def by_link(self, request: Request) -> Response:
        page, size = max(1, _int(request, "page", 1)), self.size(request)
        items = _orders((page - 1) * size, size, self.config.total)
        links = [f'<{request.url.include_query_params(page=1)}>; rel="first"']
        if page * size < self.config.total:
            links.append(f'<{request.url.include_query_params(page=page + 1)}>; rel="next"')
        return JSONResponse(items, headers={"Link": ", ".join(links)})

    def by_cursor(self, request: Request) -> Response:
        cursor = request.query_params.get("cursor")
        offset = _decode_cursor(cursor) if cursor else 0
        if offset < 0:
            return JSONResponse({"error": f"invalid cursor {cursor!r}"}, status_code=400)
        size = self.size(request)
        items = _orders(offset, size, self.config.total)
        following = offset + size
        next_cursor = _encode_cursor(following) if following < self.config.total else None
        return JSONResponse({"data": {"results": items}, "meta": {"next_cursor": next_cursor}})

    def by_odata(self, request: Request) -> Response:
        skip, size = _int(request, "$skip", 0), self.size(request, "$top")
        body: dict[str, Any] = {"value": _orders(skip, size, self.config.total)}
        if skip + size < self.config.total:
            following = request.url.include_query_params(**{"$skip": skip + size})
            body["@odata.nextLink"] = str(following)
        return JSONResponse(body)

    def eventually(self, request: Request) -> Response:
        key = request.path_params["key"]
        after = _int(request, "after", 3)
        path = f"/eventually/{key}"
        seen = sum(n for served, n in self.served.items() if served.split("?")[0] == path)
        if seen <= after:
            return JSONResponse({"key": key, "ready": False}, status_code=404)
        return JSONResponse({"key": key, "ready": True, "after": seen - 1})

    def status(self, request: Request) -> Response:
        code = int(request.path_params["code"])
        return JSONResponse({"status": code, "detail": f"you asked for {code}"}, status_code=code)

    def gated(self, handler: Callable[[Request], Response]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            refused = await self.refusal(request)
            return refused if refused is not None else handler(request)

        return endpoint

    async def stats(self, request: Request) -> Response:
        return JSONResponse({"requests": dict(self.served)})


def create_app(config: DemoApiConfig | None = None) -> Starlette:
    """The demo API as an ASGI app (serve it with uvicorn, or :func:`running_demo_api`)."""
    api = _DemoApi(config or DemoApiConfig())
    return Starlette(
        routes=[
            Route("/orders", api.gated(api.by_page)),
            Route("/orders/offset", api.gated(api.by_offset)),
            Route("/orders/link", api.gated(api.by_link)),
            Route("/orders/cursor", api.gated(api.by_cursor)),
            Route("/orders/odata", api.gated(api.by_odata)),
            Route("/eventually/{key}", api.gated(api.eventually)),
            Route("/status/{code:int}", api.gated(api.status)),
            Route("/stats", api.stats),
        ]
    )


def _server(config: DemoApiConfig) -> Any:
    import uvicorn

    return uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            log_level="warning",
            lifespan="off",
            ws="none",
            http="h11",
            access_log=False,
        )
    )


def serve(
    config: DemoApiConfig,
    host: str = "127.0.0.1",
    port: int = 8081,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Serve the demo API until interrupted; ``on_listening`` gets the base URL once the
    socket listens (port 0 picks a free port)."""
    sock = socket.create_server((host, port))
    if on_listening is not None:
        on_listening(f"http://{host}:{sock.getsockname()[1]}")
    _server(config).run(sockets=[sock])


@contextlib.contextmanager
def running_demo_api(config: DemoApiConfig | None = None, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve the demo API on an ephemeral port in a thread; yields its base URL.

    The socket listens before the block starts, so requests made at once wait in its
    backlog until the server accepts them.
    """
    sock = socket.create_server((host, 0))
    port = sock.getsockname()[1]
    server = _server(config or DemoApiConfig())
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="demo-api", daemon=True
    )
    thread.start()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
