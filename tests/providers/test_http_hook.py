"""HttpHook against a real server on loopback: retries, Retry-After, auth, errors."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tailrace.providers.http import HttpError, HttpHook, HttpSensor
from tailrace.sdk.connections import get_connection

from .conftest import Reply, ScriptedServer


def test_429_is_retried_after_the_retry_after_header_not_the_backoff(
    server: ScriptedServer,
) -> None:
    server.script(
        "/busy",
        Reply(429, {"error": "slow down"}, {"Retry-After": "0"}),
        Reply(429, {"error": "slow down"}, {"Retry-After": "0"}),
        Reply(200, {"ok": True}),
    )
    # A backoff of an hour: only Retry-After: 0 lets this finish at once.
    hook = HttpHook(None, base_url=server.url, retry_backoff=3600, max_retry_wait=3600)
    started = time.monotonic()
    assert hook.run("/busy").json() == {"ok": True}
    assert time.monotonic() - started < 5
    assert server.count("/busy") == 3


def test_retry_after_seconds_are_waited(server: ScriptedServer) -> None:
    server.script("/busy", Reply(429, {}, {"Retry-After": "1"}), Reply(200, {"ok": True}))
    hook = HttpHook(None, base_url=server.url, retry_backoff=0)
    started = time.monotonic()
    assert hook.run("/busy").status_code == 200
    assert time.monotonic() - started >= 1.0


def test_a_burst_of_500s_is_retried_with_backoff_async(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.script("/flaky", *[Reply(500, {"e": i}) for i in range(3)], Reply(200, [1, 2]))
    hook = HttpHook(None, base_url=server.url, retry_backoff=0.01, max_retries=3)
    with caplog.at_level(logging.WARNING, "tailrace.providers.http"):
        response = asyncio.run(hook.arun("/flaky"))
    assert response.json() == [1, 2]
    assert server.count("/flaky") == 4
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 3
    assert "GET http://127.0.0.1" in retries[0] and "returned 500" in retries[0]
    assert "(retry 3 of 3)" in retries[2]


def test_retries_running_out_fail_with_the_status_and_body(server: ScriptedServer) -> None:
    server.script("/down", Reply(503, {"error": "maintenance until noon"}))
    hook = HttpHook(None, base_url=server.url, retry_backoff=0.01, max_retries=2)
    with pytest.raises(HttpError) as caught:
        hook.run("/down")
    assert caught.value.status == 503
    assert "gave up after 3 attempts" in str(caught.value)
    assert "maintenance until noon" in str(caught.value)
    assert server.count("/down") == 3


def test_a_4xx_fails_at_once_with_status_masked_url_and_body(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = server.url.removeprefix("http://")
    monkeypatch.setenv("TAILRACE_CONN_API", f"http://robot:s3cret-pass@{host}/v1")
    server.script("/v1/missing", Reply(404, {"detail": "order 7 not found"}))
    with pytest.raises(HttpError) as caught:
        HttpHook("api", retry_backoff=0.01).run("missing")
    message = str(caught.value)
    assert caught.value.status == 404
    assert f"GET http://{host}/v1/missing returned 404" in message
    assert "order 7 not found" in message
    assert "s3cret-pass" not in message
    assert server.count("/v1/missing") == 1
    # The hook sent basic auth from the connection.
    assert server.seen[0].headers["Authorization"].startswith("Basic ")


def test_a_connection_without_login_is_a_bearer_token(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAILRACE_CONN_GRAPH", f"{server.url.replace('//', '//:tok-123456@')}")
    server.script("/me", Reply(200, {"id": 1}))
    assert HttpHook("graph").run("/me").json() == {"id": 1}
    assert server.seen[0].headers["Authorization"] == "Bearer tok-123456"


def test_auth_type_in_the_connection_forces_basic(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "TAILRACE_CONN_BASIC", server.url.replace("//", "//:pw-4567@") + "?auth_type=basic"
    )
    server.script("/x", Reply(200, {}))
    HttpHook("basic").run("/x")
    assert server.seen[0].headers["Authorization"].startswith("Basic ")
    assert get_connection("basic").extra == {"auth_type": "basic"}


def test_a_refused_connection_is_retried_then_fails_naming_the_url() -> None:
    hook = HttpHook(None, base_url="http://127.0.0.1:9", retry_backoff=0.01, max_retries=1)
    with pytest.raises(HttpError) as caught:
        hook.run("/nothing")
    assert "GET http://127.0.0.1:9/nothing failed" in str(caught.value)
    assert "gave up after 2 attempts" in str(caught.value)


def test_a_poking_sensor_logs_each_poke_until_the_endpoint_answers(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.script("/job", Reply(404, {}), Reply(404, {}), Reply(200, {"state": "done"}))
    sensor = HttpSensor(
        task_id="job", http_conn_id=None, base_url=server.url, endpoint="/job", poke_interval=5
    )
    with caplog.at_level(logging.INFO):
        assert [sensor.poke({}) for _ in range(3)] == [False, False, True]  # type: ignore[arg-type]
    assert f"poke 2: GET {server.url}/job returned 404, waiting 5 s" in caplog.text
    assert sensor._result == {"state": "done"}
    server.script("/job", Reply(500, {"e": "x"}))
    failing = HttpSensor(
        task_id="bad", http_conn_id=None, base_url=server.url, endpoint="/job", max_retries=0
    )
    with pytest.raises(HttpError, match="returned 500"):
        failing.poke({})  # type: ignore[arg-type]
