"""Security headers on every response.

The web UI loads only its own scripts, styles and API (``'self'``); only the interactive
API documentation at /docs runs an inline script (Swagger UI's bootstrap), so it alone
gets a looser policy. No page may be framed (clickjacking), nothing is content-sniffed,
no URL leaks through ``Referer``, and over HTTPS browsers are told to stay on HTTPS.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
# Swagger UI's files are served from /docs/assets (`_docs`): no CDN is allowed.
DOCS_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; "
    "style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
DOCS_PATHS = frozenset({"/docs", "/docs/oauth2-redirect"})
_FIXED = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
HSTS = "max-age=31536000"


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        docs = scope["path"] in DOCS_PATHS
        https = scope.get("scheme") == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _FIXED.items():
                    headers.setdefault(name, value)
                headers.setdefault(
                    "Content-Security-Policy",
                    DOCS_CONTENT_SECURITY_POLICY if docs else CONTENT_SECURITY_POLICY,
                )
                if https:
                    headers.setdefault("Strict-Transport-Security", HSTS)
            await send(message)

        await self.app(scope, receive, send_with_headers)
