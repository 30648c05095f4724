"""Serving the API with uvicorn on a thread of the calling process."""

from __future__ import annotations

import socket
import threading

import uvicorn

from tailrace.api._app import create_app
from tailrace.api._context import ApiContext
from tailrace.api._listen import bind
from tailrace.api.errors import ApiServerError


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


class ApiServer:
    """The API on ``host:port`` (port 0: any free port; see ``port`` once started)."""

    def __init__(self, ctx: ApiContext, host: str, port: int) -> None:
        self.host = host
        self._requested_port = port
        self.port = port
        self.app = create_app(ctx)
        self._server = _Server(
            uvicorn.Config(
                self.app,
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=5,
            )
        )
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0, sock: socket.socket | None = None) -> None:
        """Serve on ``sock`` (one the caller bound) or on a socket bound here, not in the
        server's thread, so a port in use is an error the caller sees (and port 0 becomes
        a known port) before anything is served."""
        if sock is None:
            sock = bind(self.host, self._requested_port)
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="api-server", daemon=True
        )
        self._thread.start()
        if not self._server.ready.wait(timeout):
            raise ApiServerError(f"the API server did not start within {timeout}s")

    def stop(self) -> None:
        self.app.state.tailrace.closing.set()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)

    def wait(self) -> None:
        """Block until the server has stopped (``stop()`` from another thread)."""
        if self._thread is not None:
            self._thread.join()
