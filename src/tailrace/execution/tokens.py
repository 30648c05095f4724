"""Per-try tokens: what a remote worker shows the execution API (ADR 0009).

An HMAC-SHA256 JWT signed with ``secret_key``, naming one task instance and one try. It
grants nothing else: the API also checks the try is still the instance's current one, so
a cleared or timed-out try is refused even while its token is unexpired.

A callback's token (ADR 0034) names one ``dag_callback`` row, with its own audience so
neither kind of token passes for the other; the API accepts it while the row is queued.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any

import jwt

from tailrace.sdk.errors import TailraceError

ALGORITHM = "HS256"
AUDIENCE = "tailrace-execution-api"
CALLBACK_AUDIENCE = "tailrace-execution-api-callback"
# For a try with no execution_timeout: a backstop, since a try is refused as soon as it
# stops being current anyway.
LIFETIME_SECONDS = 7 * 24 * 3600


class InvalidTaskTokenError(TailraceError):
    pass


def issue_task_token(
    secret: str,
    ti_id: int,
    try_number: int,
    now: float | None = None,
    lifetime: float = LIFETIME_SECONDS,
) -> str:
    return _issue(secret, AUDIENCE, ti_id, {"try": try_number}, now, lifetime)


def verify_task_token(secret: str, token: str, now: float | None = None) -> tuple[int, int]:
    """``(ti_id, try_number)`` the token grants; raises InvalidTaskTokenError otherwise.

    A try shows its token twice or more (its start, then its result with the next try's
    start, its heartbeats): the signature is checked once, and its expiry at each use."""
    ti_id, try_number, expires = _verified_task_token(secret, token)
    if (time.time() if now is None else now) >= expires:
        raise InvalidTaskTokenError("invalid task token: Signature has expired")
    return ti_id, try_number


@lru_cache(maxsize=4096)
def _verified_task_token(secret: str, token: str) -> tuple[int, int, int]:
    """What a valid token grants and when it expires (an invalid one raises; it is not
    remembered)."""
    claims = _verify(secret, token, AUDIENCE, "task", ["sub", "try", "exp"])
    try:
        return int(claims["sub"]), int(claims["try"]), int(claims["exp"])
    except (ValueError, TypeError) as exc:
        raise InvalidTaskTokenError(f"invalid task token: {exc}") from None


def issue_callback_token(
    secret: str, callback_id: int, now: float | None = None, lifetime: float = LIFETIME_SECONDS
) -> str:
    return _issue(secret, CALLBACK_AUDIENCE, callback_id, {}, now, lifetime)


def verify_callback_token(secret: str, token: str) -> int:
    """The callback id the token grants; raises InvalidTaskTokenError otherwise."""
    claims = _verify(secret, token, CALLBACK_AUDIENCE, "callback", ["sub", "exp"])
    try:
        return int(claims["sub"])
    except (ValueError, TypeError) as exc:
        raise InvalidTaskTokenError(f"invalid callback token: {exc}") from None


def _issue(
    secret: str,
    audience: str,
    subject: int,
    claims: dict[str, object],
    now: float | None,
    lifetime: float,
) -> str:
    issued = int(time.time() if now is None else now)
    return jwt.encode(
        {
            "sub": str(subject),
            **claims,
            "aud": audience,
            "iat": issued,
            "exp": issued + int(lifetime),
        },
        secret,
        algorithm=ALGORITHM,
    )


def _verify(
    secret: str, token: str, audience: str, kind: str, required: list[str]
) -> dict[str, Any]:
    try:
        return jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            audience=audience,
            options={"require": required},
        )
    except jwt.InvalidTokenError as exc:
        raise InvalidTaskTokenError(f"invalid {kind} token: {exc}") from None
