from __future__ import annotations

import socket
import threading

import httpx
import pytest
from anyio import to_thread
from sqlalchemy import Engine

from tailrace.api import ApiContext, ApiServer, ApiServerError
from tailrace.api._json import StrictJsonRoute
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

    async def limit() -> dict[str, int]:
        # Asked on the serving event loop, whose limiter every plain-function route waits on.
        return {"limit": int(to_thread.current_default_thread_limiter().total_tokens)}

    def thread() -> dict[str, str]:
        return {"thread": threading.current_thread().name}

    # Ahead of the web UI's mount at "/", which would answer these paths otherwise.
    server.app.router.routes[:0] = [
        StrictJsonRoute("/test-thread-limit", limit),
        StrictJsonRoute("/test-thread", thread),
    ]
    server.start()
    try:
        answers = [httpx.get(f"{server.url}/{path}", timeout=30).json() for path in PROBES]
    finally:
        server.stop()
        server.app.state.tailrace.wakeups.close()
    assert answers[0] == {"limit": 3}
    # A plain function still runs off the loop (on the serving thread, "api-server").
    assert answers[1]["thread"] != "api-server"
    assert answers[1]["thread"] != threading.current_thread().name


PROBES = ("test-thread-limit", "test-thread")


def test_api_all_is_pinned() -> None:
    import tailrace.api

    assert sorted(tailrace.api.__all__) == sorted(
        ["API_PREFIX", "ApiContext", "ApiServer", "create_app", "ApiError", "ApiServerError"]
    )
