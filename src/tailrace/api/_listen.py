"""The API's listening socket: bound by whoever owns the port (standalone's parent holds
it across API child restarts), without loading the web framework."""

from __future__ import annotations

import socket

from tailrace.api.errors import ApiServerError


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: any free port), or an error naming the fix."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ApiServerError(
            f"the API cannot listen on {host}:{port}: {exc.strerror}; "
            "set api_host/api_port (TAILRACE_API_PORT) to a free address"
        ) from None
    sock.listen(1024)
    return sock
