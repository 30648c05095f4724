"""A scripted HTTP server on loopback, the demo API, the DAG-running fixtures, and the
PostgreSQL sink the queue triggers' exactly-once tests write to."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import Engine, create_engine, text

from tailrace.demo_api import DemoApiConfig, running_demo_api
from tailrace.testing._db import (
    postgres_server_url,
    postgres_unavailable_reason,
    temporary_postgres_database,
)

from ._queue_sink import _unavailable

WriteDag = Callable[[str, str], Path]


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-encoded unless bytes/str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]


Route = Callable[[Seen], Reply]


class ScriptedServer:
    """A real HTTP server: each path answers from a function of the request; every
    request is recorded in order."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._answer(self)

            def do_POST(self) -> None:
                server._answer(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def route(self, path: str, fn: Route) -> None:
        self.routes[path] = fn

    def script(self, path: str, *replies: Reply) -> None:
        """Answer ``path`` with ``replies`` in turn, then the last one forever."""
        queue = list(replies)

        def next_reply(_: Seen) -> Reply:
            return queue.pop(0) if len(queue) > 1 else queue[0]

        self.route(path, next_reply)

    def count(self, path: str) -> int:
        return sum(1 for s in self.seen if s.path == path)

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        if "Content-Length" in handler.headers:
            handler.rfile.read(int(handler.headers["Content-Length"]))
        seen = Seen(
            handler.command,
            parts.path,
            {k: v[-1] for k, v in parse_qs(parts.query).items()},
            dict(handler.headers.items()),
        )
        with self._lock:
            self.seen.append(seen)
            route = self.routes.get(parts.path)
            reply = route(seen) if route else Reply(404, {"error": "no such route"})
        body = reply.body
        if isinstance(body, str):
            data, kind = body.encode(), "text/plain"
        elif isinstance(body, bytes):
            data, kind = body, "application/octet-stream"
        else:
            data, kind = json.dumps(body).encode(), "application/json"
        handler.send_response(reply.status)
        handler.send_header("Content-Type", reply.headers.pop("Content-Type", kind))
        handler.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer()
    s.thread.start()
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join(timeout=10)


@pytest.fixture
def demo_api() -> Iterator[str]:
    with running_demo_api(DemoApiConfig(page_size=4, pages=5)) as url:
        yield url


@pytest.fixture
def sink() -> Iterator[Engine]:
    """A PostgreSQL database holding the sink table (keyed by message id) and a log of
    every row a handler tried to write (no key: a message handled twice shows there)."""
    url = postgres_server_url()
    if (reason := postgres_unavailable_reason(url)) is not None:
        _unavailable(f"PostgreSQL unavailable: {reason}")
    with temporary_postgres_database(url, prefix="tailrace_sink") as sink_url:
        engine = create_engine(sink_url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE sink (id text PRIMARY KEY, n integer NOT NULL)"))
            conn.execute(text("CREATE TABLE attempts (id text NOT NULL)"))
        try:
            yield engine
        finally:
            engine.dispose()
