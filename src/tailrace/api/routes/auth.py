from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import APIKeyCookie

from tailrace.api import models
from tailrace.api._auth import SESSION_COOKIE, User
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api.errors import NotAuthenticated, TooManyRequests
from tailrace.clock import utcnow
from tailrace.users import AuthenticatedUser, authenticate, issue_token, revoke_token

router = APIRouter(tags=["Auth"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]
_session_cookie = APIKeyCookie(name=SESSION_COOKIE, auto_error=False)


def _login(
    ctx: ApiContext, request: Request, body: models.TokenRequest
) -> tuple[AuthenticatedUser, models.TokenResponse]:
    client = request.client.host if request.client else "unknown"
    # Checked before the password: a throttled client costs no scrypt.
    wait = ctx.login_throttle.retry_after(client)
    if wait is not None:
        raise TooManyRequests(
            f"too many failed logins from {client}; try again in {math.ceil(wait)} s",
            headers={"Retry-After": str(math.ceil(wait))},
        )
    with ctx.readonly.connect() as conn:
        user = authenticate(conn, body.username, body.password)
    if user is None:
        ctx.login_throttle.failed(client)
        raise NotAuthenticated("wrong username or password")
    with ctx.engine.begin() as conn:
        token, expires_at = issue_token(conn, user.id, utcnow())
    return user, models.TokenResponse(access_token=token, expires_at=expires_at)


@router.post("/auth/token", response_model=models.TokenResponse, status_code=201)
def create_token(ctx: Ctx, request: Request, body: models.TokenRequest) -> models.TokenResponse:
    """Exchange a username and password for a bearer token (valid 24 hours). After
    `auth_rate_limit_attempts` failures from one address within `auth_rate_limit_seconds`,
    429 with `Retry-After`."""
    return _login(ctx, request, body)[1]


@router.post("/auth/session", response_model=models.Session, status_code=201)
def create_session(
    ctx: Ctx, request: Request, response: Response, body: models.TokenRequest
) -> models.Session:
    """Log the web UI in: the token goes into an HttpOnly, SameSite=Strict cookie (valid 24
    hours). Requests it authenticates that change something must send `X-Tailrace-CSRF`."""
    user, token = _login(ctx, request, body)
    response.set_cookie(
        SESSION_COOKIE,
        token.access_token,
        max_age=int((token.expires_at - utcnow()).total_seconds()),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return models.Session(username=user.username, role=user.role.value, expires_at=token.expires_at)


@router.delete("/auth/session", status_code=204)
def delete_session(
    ctx: Ctx, session: Annotated[str | None, Depends(_session_cookie)] = None
) -> Response:
    """Log the web UI out: the cookie's token is revoked and the cookie removed."""
    if session and len(session) <= 200:
        with ctx.engine.begin() as conn:
            revoke_token(conn, session)
        ctx.tokens.forget(session)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/auth/me", response_model=models.Me)
def me(user: User) -> models.Me:
    """Who the token belongs to, and their role."""
    return models.Me(username=user.username, role=user.role.value)
