from __future__ import annotations

import socket

import httpx
import pytest
from anyio import to_thread
from fastapi.routing import APIRoute
from sqlalchemy import Engine

from tailrace.api import ApiContext, ApiServer, ApiServerError
from tailrace.config import Settings, override
from tailrace.notify import Wakeups


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_a_port_in_use_is_a_clear_error_before_serving(engine: Engine, settings: Settings) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        server = ApiServer(
            ApiContext(settings, engine, Wakeups(settings.home, engine)), "127.0.0.1", port
        )
        with pytest.raises(ApiServerError, match=f"cannot listen on 127.0.0.1:{port}.*api_port"):
            server.start()


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_the_serving_loop_runs_as_many_handlers_at_once_as_api_threads_says(
    engine: Engine, settings: Settings
) -> None:
    settings = override(settings, "api_threads", 3, "test")
    server = ApiServer(ApiContext(settings, engine, Wakeups(settings.home, engine)), "127.0.0.1", 0)

    async def limit() -> int:
        # Asked on the serving event loop, whose limiter every sync handler waits on.
        return int(to_thread.current_default_thread_limiter().total_tokens)

    # Ahead of the web UI's mount at "/", which would answer the path otherwise.
    server.app.router.routes.insert(0, APIRoute("/test-thread-limit", limit))
    server.start()
    try:
        reply = httpx.get(f"{server.url}/test-thread-limit", timeout=30)
    finally:
        server.stop()
        server.app.state.tailrace.wakeups.close()
    assert reply.json() == 3


def test_api_all_is_pinned() -> None:
    import tailrace.api

    assert sorted(tailrace.api.__all__) == sorted(
        ["API_PREFIX", "ApiContext", "ApiServer", "create_app", "ApiError", "ApiServerError"]
    )
