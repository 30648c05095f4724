"""The API's listening sockets: bound by whoever owns the port (standalone's parent holds
them across API child restarts), without loading the web framework."""

from __future__ import annotations

import socket

from tailrace.api.errors import ApiServerError


def bind(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening socket on ``host:port`` (0: any free port), or an error naming the fix."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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


def bind_group(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` listening sockets on one ``host:port``, one per API process.

    With more than one, each has ``SO_REUSEPORT``: the kernel spreads new connections
    evenly over them (by address hash), where processes accepting from one shared socket
    would take them in bursts, whichever was idle first. The port is first bound alone,
    without the option, so that a port another process serves (even one of ours, with
    the option) is an error here as it is with one process, not a share of its traffic.
    """
    if count == 1 or not hasattr(socket, "SO_REUSEPORT"):
        return [bind(host, port)]
    probe = bind(host, port)
    port = probe.getsockname()[1]
    sockets: list[socket.socket] = []
    try:
        probe.close()
        for _ in range(count):
            sockets.append(bind(host, port, reuse_port=True))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets
