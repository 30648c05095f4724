from __future__ import annotations

import socket

import pytest
from sqlalchemy import Engine

from tailrace.api import ApiContext, ApiServer, ApiServerError
from tailrace.config import Settings
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


def test_api_all_is_pinned() -> None:
    import tailrace.api

    assert sorted(tailrace.api.__all__) == sorted(
        ["API_PREFIX", "ApiContext", "ApiServer", "create_app", "ApiError", "ApiServerError"]
    )
