"""Per-try tokens: what a remote worker shows the execution API (ADR 0009).

An HMAC-SHA256 JWT signed with ``secret_key``, naming one task instance and one try. It
grants nothing else: the API also checks the try is still the instance's current one, so
a cleared or timed-out try is refused even while its token is unexpired.
"""

from __future__ import annotations

import time

import jwt

from tailrace.sdk.errors import TailraceError

ALGORITHM = "HS256"
AUDIENCE = "tailrace-execution-api"
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
    issued = int(time.time() if now is None else now)
    claims = {
        "sub": str(ti_id),
        "try": try_number,
        "aud": AUDIENCE,
        "iat": issued,
        "exp": issued + int(lifetime),
    }
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_task_token(secret: str, token: str) -> tuple[int, int]:
    """``(ti_id, try_number)`` the token grants; raises InvalidTaskTokenError otherwise."""
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            audience=AUDIENCE,
            options={"require": ["sub", "try", "exp"]},
        )
        return int(claims["sub"]), int(claims["try"])
    except (jwt.InvalidTokenError, ValueError, TypeError) as exc:
        raise InvalidTaskTokenError(f"invalid task token: {exc}") from None
