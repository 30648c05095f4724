from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from tailrace.api import models
from tailrace.api._auth import User
from tailrace.api._context import ApiContext, context
from tailrace.api.errors import NotAuthenticated
from tailrace.scheduler import utcnow
from tailrace.users import authenticate, issue_token

router = APIRouter(tags=["Auth"])
Ctx = Annotated[ApiContext, Depends(context)]


@router.post("/auth/token", response_model=models.TokenResponse, status_code=201)
def create_token(ctx: Ctx, body: models.TokenRequest) -> models.TokenResponse:
    """Exchange a username and password for a bearer token (valid 24 hours)."""
    with ctx.readonly.connect() as conn:
        user = authenticate(conn, body.username, body.password)
    if user is None:
        raise NotAuthenticated("wrong username or password")
    with ctx.engine.begin() as conn:
        token, expires_at = issue_token(conn, user.id, utcnow())
    return models.TokenResponse(access_token=token, expires_at=expires_at)


@router.get("/auth/me", response_model=models.Me)
def me(user: User) -> models.Me:
    """Who the token belongs to, and their role."""
    return models.Me(username=user.username, role=user.role.value)
