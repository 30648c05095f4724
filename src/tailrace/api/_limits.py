"""A bound on request bodies, enforced as they arrive rather than after they are read.

A body declared (``Content-Length``) or found (chunked, counted as it streams in) to be
over ``api_max_request_bytes`` makes the first read of it fail with 413; FastAPI reads a
route's body before it resolves dependencies, so an oversized request is refused before
authentication and before more than the limit is buffered. Starlette's own limit answers
in plain text, not the API's error body.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RequestTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            f"the request body is over the limit of {limit:,} bytes (api_max_request_bytes); "
            "send less",
            headers={"Connection": "close"},
        )


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        received = int(declared) if declared.isdigit() else 0

        async def limited_receive() -> Message:
            nonlocal received
            if received > self.max_bytes:
                raise RequestTooLarge(self.max_bytes)
            message = await receive()
            if message["type"] == "http.request" and not declared.isdigit():
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise RequestTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited_receive, send)
