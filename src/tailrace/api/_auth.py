"""Bearer-token authentication and the two roles: viewers read, admins also change things."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tailrace.api._context import ApiContext, context
from tailrace.api.errors import Forbidden, NotAuthenticated
from tailrace.scheduler import utcnow
from tailrace.users import AuthenticatedUser, user_for_token

_bearer = HTTPBearer(auto_error=False, description="A token from POST /api/v1/auth/token.")


def current_user(
    ctx: Annotated[ApiContext, Depends(context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> AuthenticatedUser:
    if credentials is None:
        raise NotAuthenticated(
            "send 'Authorization: Bearer TOKEN'; get a token from POST /api/v1/auth/token"
        )
    token = credentials.credentials
    if len(token) > 200 or "\x00" in token:
        raise NotAuthenticated("the token is invalid or has expired; get a new one")
    with ctx.readonly.connect() as conn:
        user = user_for_token(conn, token, utcnow())
    if user is None:
        raise NotAuthenticated("the token is invalid or has expired; get a new one")
    return user


def require_admin(
    user: Annotated[AuthenticatedUser, Depends(current_user)],
) -> AuthenticatedUser:
    if not user.is_admin:
        raise Forbidden(f"user {user.username!r} is a viewer; only admins may change things")
    return user


User = Annotated[AuthenticatedUser, Depends(current_user)]
Admin = Depends(require_admin)
