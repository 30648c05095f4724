"""Request bodies are bounded before anything reads or authenticates them; so is `conf`."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from pathlib import Path

import pytest

from tailrace.api import ApiServer
from tailrace.config import ConfigError, load_settings
from tailrace.testing import DagHarness

from .conftest import Api

HUGE = 300 * 1024 * 1024


def _raw_request(server: ApiServer, head: str, body: bytes = b"") -> tuple[int, dict[str, str]]:
    """Send a request's head (and the start of a body) and read the answer; the socket's
    timeout fails the test if the server waits for the rest of the body instead."""
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n\r\n" + body)
        return _read_response(sock)


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str]]:
    data = b""
    while b"\r\n\r\n" not in data or not _complete(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    return status, json.loads(body)


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.lower() == "content-length":
            return len(body) >= int(value)
    return False


def test_an_oversized_body_is_refused_from_its_content_length_before_authentication(
    api: Api,
) -> None:
    status, body = _raw_request(
        api.server,
        "POST /api/v1/dags/api_basic/runs HTTP/1.1\r\nHost: test\r\n"
        f"Content-Type: application/json\r\nContent-Length: {HUGE}",
        b'{"conf": {',
    )
    assert status == 413
    assert body["error"]["code"] == "request_too_large"
    assert "api_max_request_bytes" in body["error"]["message"]
    assert f"{4 * 1024 * 1024:,}" in body["error"]["message"]


def test_a_streamed_body_is_cut_off_at_the_limit(api: Api) -> None:
    """No Content-Length (chunked): the server counts what arrives and stops at the limit."""
    sock = socket.create_connection((api.server.host, api.server.port), timeout=10)
    sent = 0

    def send_chunks() -> None:
        nonlocal sent
        chunk = b"x" * 65536
        framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        try:
            while sent < HUGE:
                sock.sendall(framed)
                sent += len(chunk)
        except OSError:  # the server answered and closed: what we want
            pass

    sock.sendall(
        b"POST /api/v1/connections HTTP/1.1\r\nHost: test\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    writer = threading.Thread(target=send_chunks)
    writer.start()
    try:
        status, body = _read_response(sock)
    finally:
        # The server may have closed its end already: that is what a refusal looks like.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        writer.join()
    assert status == 413
    assert body["error"]["code"] == "request_too_large"
    assert sent < HUGE


def test_a_body_within_the_limit_still_works(api: Api, harness: DagHarness) -> None:
    response = api.admin.post(
        "/dags/api_basic/runs", json={"conf": {"greeting": "x" * (512 * 1024)}}
    )
    assert response.status_code == 201, response.text[:300]


def test_conf_over_max_payload_bytes_is_refused(api: Api, harness: DagHarness) -> None:
    big = {"greeting": "x" * (1024 * 1024 + 10)}
    response = api.admin.post("/dags/api_basic/runs", json={"conf": big})
    assert response.status_code == 413, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "conf_too_large"
    assert "max_payload_bytes" in error["message"]
    assert api.admin.get("/dags/api_basic/runs").json()["items"] == []


def test_the_request_limit_must_hold_a_workers_report(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(
            {
                "TAILRACE_HOME": str(tmp_path),
                "TAILRACE_MAX_PAYLOAD_BYTES": str(8 * 1024 * 1024),
            }
        )
    assert "api_max_request_bytes" in str(caught.value)
    assert "max_payload_bytes" in str(caught.value)
    raised = load_settings(
        {
            "TAILRACE_HOME": str(tmp_path),
            "TAILRACE_MAX_PAYLOAD_BYTES": str(8 * 1024 * 1024),
            "TAILRACE_API_MAX_REQUEST_BYTES": str(9 * 1024 * 1024),
        }
    )
    assert raised.api_max_request_bytes == 9 * 1024 * 1024
