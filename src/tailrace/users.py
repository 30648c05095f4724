"""Users of the API and their bearer tokens.

Passwords are hashed with ``hashlib.scrypt`` (a random 16-byte salt per password, n=2**14,
r=8, p=1): in the standard library, memory-hard, and parameters stored with each hash so
they can be raised later without invalidating old ones. Tokens are 256 random bits, so a
plain SHA-256 of them is enough to store: there is nothing to brute-force.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import Connection, delete, insert, select

from tailrace.db.models import ApiToken, User
from tailrace.errors import InvalidRoleError, UserExistsError

TOKEN_LIFETIME = timedelta(hours=24)

_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1
# A hash to check against when the user does not exist, so a wrong username costs as much
# time as a wrong password and does not reveal which usernames exist.
_DUMMY_HASH: str | None = None


class Role(StrEnum):
    ADMIN = "admin"
    VIEWER = "viewer"


@dataclass(frozen=True, slots=True)
class AuthenticatedUser:
    id: int
    username: str
    role: Role

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32
    )
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = _unb64(digest)
        actual = hashlib.scrypt(
            password.encode(),
            salt=_unb64(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
        )
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)


def parse_role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise InvalidRoleError(role) from None


def create_user(conn: Connection, username: str, password: str, role: str, now: datetime) -> int:
    role_ = parse_role(role)
    if conn.scalar(select(User.id).where(User.username == username)) is not None:
        raise UserExistsError(username)
    user_id: int = conn.execute(
        insert(User)
        .values(
            username=username,
            password_hash=hash_password(password),
            role=role_.value,
            created_at=now,
        )
        .returning(User.id)
    ).scalar_one()
    return user_id


def user_exists(conn: Connection, username: str) -> bool:
    return conn.scalar(select(User.id).where(User.username == username)) is not None


def authenticate(conn: Connection, username: str, password: str) -> AuthenticatedUser | None:
    """The user if the password is right, else None (same cost either way)."""
    global _DUMMY_HASH
    row = conn.execute(
        select(User.id, User.username, User.role, User.password_hash).where(
            User.username == username
        )
    ).first()
    if row is None:
        _DUMMY_HASH = _DUMMY_HASH or hash_password(secrets.token_hex(8))
        verify_password(password, _DUMMY_HASH)
        return None
    if not verify_password(password, row.password_hash):
        return None
    return AuthenticatedUser(row.id, row.username, Role(row.role))


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_token(
    conn: Connection, user_id: int, now: datetime, lifetime: timedelta = TOKEN_LIFETIME
) -> tuple[str, datetime]:
    """A new bearer token for the user (shown once; only its hash is stored)."""
    token = secrets.token_urlsafe(32)
    expires_at = now + lifetime
    # Expired tokens are useless: drop the user's old ones while we are writing anyway.
    conn.execute(delete(ApiToken).where(ApiToken.user_id == user_id, ApiToken.expires_at < now))
    conn.execute(
        insert(ApiToken).values(
            user_id=user_id, token_hash=_token_hash(token), created_at=now, expires_at=expires_at
        )
    )
    return token, expires_at


def token_owner(conn: Connection, token: str) -> tuple[AuthenticatedUser, datetime | None] | None:
    """Whose token this is and when it expires (``None``: never), or ``None`` if unknown."""
    row = conn.execute(
        select(User.id, User.username, User.role, ApiToken.expires_at)
        .join(ApiToken, ApiToken.user_id == User.id)
        .where(ApiToken.token_hash == _token_hash(token))
    ).first()
    if row is None:
        return None
    return AuthenticatedUser(row.id, row.username, Role(row.role)), row.expires_at


def list_users(conn: Connection) -> list[tuple[str, str]]:
    return [
        (r.username, r.role)
        for r in conn.execute(select(User.username, User.role).order_by(User.username))
    ]


def revoke_token(conn: Connection, token: str) -> None:
    """Forget a token (logging out): it authenticates nobody from now on."""
    conn.execute(delete(ApiToken).where(ApiToken.token_hash == _token_hash(token)))
