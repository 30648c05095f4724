"""Login rate limiting, security headers, and the session cookie behind HTTPS."""

from __future__ import annotations

import httpx

from tailrace.api._headers import CONTENT_SECURITY_POLICY
from tailrace.api._throttle import LoginThrottle

from .conftest import PASSWORDS, Api


def _login(api: Api, password: str, client_ip: str = "192.0.2.10") -> httpx.Response:
    # The API trusts X-Forwarded-For from loopback (a local reverse proxy), as uvicorn does.
    return api.anonymous.post(
        "/auth/token",
        json={"username": "ada", "password": password},
        headers={"X-Forwarded-For": client_ip},
    )


def test_failed_logins_from_one_address_are_throttled_with_retry_after(api: Api) -> None:
    for _ in range(5):
        assert _login(api, "wrong").status_code == 401
    throttled = _login(api, PASSWORDS["ada"])  # even the right password, for now
    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "too_many_requests"
    assert 0 < int(throttled.headers["Retry-After"]) <= 40
    assert "try again in" in throttled.json()["error"]["message"]
    # Another address is not held up by the first one's failures.
    assert _login(api, PASSWORDS["ada"], client_ip="192.0.2.99").status_code == 201


def test_successful_logins_are_not_throttled(api: Api) -> None:
    for _ in range(8):
        assert _login(api, PASSWORDS["ada"]).status_code == 201


def test_the_throttle_forgets_failures_older_than_its_window() -> None:
    now = [1000.0]
    throttle = LoginThrottle(attempts=3, window=40.0, clock=lambda: now[0])
    for step in range(3):
        assert throttle.retry_after("a") is None
        throttle.failed("a")
        now[0] += 10 if step < 2 else 0
    assert throttle.retry_after("a") == 20.0  # the first failure ages out at 1040
    assert throttle.retry_after("b") is None
    now[0] = 1040.0
    assert throttle.retry_after("a") is None
    throttle.failed("a")
    assert throttle.retry_after("a") == 10.0  # the failures at 1010, 1020 (and 1040)


def test_the_throttle_holds_a_bounded_number_of_addresses() -> None:
    now = [0.0]
    throttle = LoginThrottle(attempts=2, window=40.0, clock=lambda: now[0], max_clients=4)
    for client in ("a", "a", "b", "b"):
        throttle.failed(client)
    assert throttle.retry_after("a") and throttle.retry_after("b")
    now[0] = 50.0  # a and b's failures have aged out: they make room first
    for client in ("c", "c", "d", "e", "f"):
        throttle.failed(client)
    assert throttle.retry_after("c") == 40.0
    for client in ("g", "h", "i"):  # full of live failures: the longest known go
        throttle.failed(client)
    assert throttle.retry_after("c") is None
    assert len(throttle._failures) <= 4


def test_every_response_carries_the_security_headers(api: Api) -> None:
    root = api.url.removesuffix("/api/v1")
    for response in (
        httpx.get(f"{root}/"),
        api.anonymous.get("/auth/me"),
        api.admin.get("/dags"),
        httpx.get(f"{root}/no-such-page"),
    ):
        assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert "Strict-Transport-Security" not in response.headers
    docs = httpx.get(f"{root}/docs")
    assert "frame-ancestors 'none'" in docs.headers["Content-Security-Policy"]


def test_the_session_cookie_is_secure_behind_an_https_proxy(api: Api) -> None:
    body = {"username": "ada", "password": PASSWORDS["ada"]}
    plain = api.anonymous.post("/auth/session", json=body)
    assert "secure" not in plain.headers["set-cookie"].lower()
    proxied = api.anonymous.post("/auth/session", json=body, headers={"X-Forwarded-Proto": "https"})
    cookie = proxied.headers["set-cookie"].lower()
    assert "; secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    assert proxied.headers["Strict-Transport-Security"].startswith("max-age=")


def test_viewers_see_connection_uris_with_secret_looking_parts_masked(api: Api) -> None:
    uri = "https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@blob.example.com/c?sv=1&sig=s1gn4ture"
    created = api.admin.post("/connections", json={"conn_id": "blob", "uri": uri})
    assert created.status_code == 201, created.text
    shown = api.viewer.get("/connections/blob").json()["uri"]
    assert shown == "https://***@blob.example.com/c?sv=1&sig=***"
    assert api.viewer.get("/connections").json()["items"][0]["uri"] == shown
