"""Authentication and the two roles: viewers read, admins also change things.

Scripts send ``Authorization: Bearer TOKEN``. The web UI logs in for an HttpOnly,
SameSite=Strict cookie holding a token (``EventSource`` cannot send headers); a request
authenticated by that cookie that changes something must also carry ``X-Tailrace-CSRF``,
a header no cross-site form or simple request can set.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from tailrace.api._context import ApiContext, context
from tailrace.api.errors import Forbidden, NotAuthenticated
from tailrace.clock import utcnow
from tailrace.users import AuthenticatedUser, token_owner

SESSION_COOKIE = "tailrace_session"
CSRF_HEADER = "X-Tailrace-CSRF"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_bearer = HTTPBearer(auto_error=False, description="A token from POST /api/v1/auth/token.")
_cookie = APIKeyCookie(
    name=SESSION_COOKIE,
    auto_error=False,
    description="The web UI's session, set by POST /api/v1/auth/session. Requests that "
    f"change something must also send the header {CSRF_HEADER}.",
)


async def current_user(
    request: Request,
    ctx: Annotated[ApiContext, Depends(context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    session: Annotated[str | None, Depends(_cookie)],
) -> AuthenticatedUser:
    if credentials is not None:
        token = credentials.credentials
    elif session:
        token = session
    else:
        raise NotAuthenticated(
            "send 'Authorization: Bearer TOKEN'; get a token from POST /api/v1/auth/token"
        )
    if len(token) > 200 or "\x00" in token:
        raise NotAuthenticated("the token is invalid or has expired; get a new one")
    now = utcnow()
    user = ctx.tokens.get(token, now)
    if user is None:
        found = await run_in_threadpool(_look_up, ctx, token)
        if found is not None and (found[1] is None or found[1] > now):
            user = found[0]
            ctx.tokens.put(token, *found)
    if user is None:
        raise NotAuthenticated("the token is invalid or has expired; get a new one")
    cookie_write = credentials is None and request.method not in _SAFE_METHODS
    if cookie_write and not request.headers.get(CSRF_HEADER):
        raise Forbidden(
            f"a request authenticated by the session cookie must send {CSRF_HEADER}",
            code="csrf",
        )
    return user


def _look_up(ctx: ApiContext, token: str) -> tuple[AuthenticatedUser, datetime | None] | None:
    with ctx.readonly.connect() as conn:
        return token_owner(conn, token)


async def require_admin(
    user: Annotated[AuthenticatedUser, Depends(current_user)],
) -> AuthenticatedUser:
    if not user.is_admin:
        raise Forbidden(f"user {user.username!r} is a viewer; only admins may change things")
    return user


User = Annotated[AuthenticatedUser, Depends(current_user)]
Admin = Depends(require_admin)
