"""Named connections: a URI (with its credentials) looked up by id where code runs.

A connection ``my_api`` comes from, in order:

1. the environment variable ``TAILRACE_CONN_MY_API`` (the id upper-cased, every character
   that is not a letter or digit turned into ``_``), read in the process that needs it;
2. the metadata database (``tailrace connections add``): a worker asks its owner over
   its pipe (workers have no database access); the triggerer reads the database itself.

Every password or token resolved here is registered with the log masker, so task and
trigger logs print ``***`` in its place.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, unquote_plus, urlsplit, urlunsplit

from tailrace.sdk._masking import (
    MASK,
    is_secret_name,
    is_token_user,
    mask_basic_auth,
    mask_secret,
    redact,
)
from tailrace.sdk.errors import ConnectionNotFoundError

__all__ = [  # noqa: RUF022 - grouped by concept
    "Connection",
    "get_connection",
    "aget_connection",
    "env_var_name",
    "mask_url",
    # the log masker
    "mask_secret",
    "redact",
    # for the runtime
    "ConnectionSource",
    "set_connection_source",
]

ENV_PREFIX = "TAILRACE_CONN_"

# Given a connection id, its URI from the metadata database (None: no such connection).
ConnectionSource = Callable[[str], "str | None"]

_source_lock = threading.Lock()
_source: ConnectionSource | None = None


def set_connection_source(source: ConnectionSource | None) -> ConnectionSource | None:
    """Install where this process finds connections that no environment variable defines
    (the runtime does this: a worker asks its owner, the triggerer reads the database).
    Returns the previous source, to restore it."""
    global _source
    with _source_lock:
        previous, _source = _source, source
    return previous


def env_var_name(conn_id: str) -> str:
    """``TAILRACE_CONN_<ID>``: the environment variable that defines ``conn_id``."""
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", conn_id).upper()


@dataclass(frozen=True)
class Connection:
    """A connection parsed from its URI: ``scheme://login:password@host:port/schema?extra``.

    ``conn_type`` is the scheme (``https``, ``postgresql``, ``sqlite`` ...), ``schema`` the
    path without its leading ``/``, and ``extra`` the query parameters. ``repr`` and
    :attr:`masked_uri` never show the password.
    """

    conn_id: str
    uri: str = field(repr=False)
    conn_type: str = ""
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_uri(cls, conn_id: str, uri: str) -> Connection:
        try:
            parts = urlsplit(uri)
            port = parts.port
        except ValueError as exc:
            raise ValueError(
                f"connection {conn_id!r}: {exc} in {mask_url(uri, extras=True)}"
            ) from None
        return cls(
            conn_id=conn_id,
            uri=uri,
            conn_type=parts.scheme,
            host=unquote(parts.hostname) if parts.hostname else None,
            port=port,
            login=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password is not None else None,
            schema=unquote(parts.path.removeprefix("/")),
            extra=dict(parse_qsl(parts.query, keep_blank_values=True)),
        )

    @property
    def masked_uri(self) -> str:
        return mask_url(self.uri, extras=True)

    def base_url(self, default_scheme: str = "https") -> str:
        """``scheme://host:port/schema``: the URI without credentials and query."""
        scheme = self.conn_type or default_scheme
        host = self.host or ""
        if ":" in host:  # IPv6
            host = f"[{host}]"
        netloc = f"{host}:{self.port}" if self.port is not None else host
        path = f"/{quote(self.schema)}" if self.schema else ""
        return urlunsplit((scheme, netloc, path, "", ""))


def mask_url(url: str, *, extras: bool = False) -> str:
    """``url`` with the password of its userinfo replaced by ``***`` (a user part without
    a password that looks like a token, ``https://ghp_...@host``, too) and registered
    secrets masked anywhere in it; with ``extras`` (``url`` is a connection's URI) also
    the values of query parameters named like secrets (``?api_token=***``). A URL that
    cannot be parsed is ``***`` as a whole."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return MASK
    if password and "://" in url:
        userinfo, _, hostinfo = parts.netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        url = urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{hostinfo}"))
    elif password is None and parts.username and is_token_user(unquote(parts.username)):
        hostinfo = parts.netloc.rpartition("@")[2]
        url = urlunsplit(parts._replace(netloc=f"{MASK}@{hostinfo}"))
    if extras and parts.query:
        # Spliced, not put back together: urlunsplit does not give every URL back as it
        # was (``sqlite:///x.db`` becomes ``sqlite:/x.db``).
        head, _, rest = url.partition("?")
        query, hash_, fragment = rest.partition("#")
        url = f"{head}?{_mask_params(query)}{hash_}{fragment}"
    return redact(url)


def _mask_params(query: str) -> str:
    pairs = (pair.partition("=") for pair in query.split("&"))
    return "&".join(
        f"{name}={MASK}" if sep and is_secret_name(unquote_plus(name)) else f"{name}{sep}{value}"
        for name, sep, value in pairs
    )


def _register_secrets(conn: Connection) -> None:
    if conn.password:
        mask_secret(conn.password)
        mask_basic_auth(conn.login or "", conn.password)
    elif conn.login and is_token_user(conn.login):
        mask_secret(conn.login)
    for key, value in conn.extra.items():
        if is_secret_name(key):
            mask_secret(value)


def get_connection(conn_id: str) -> Connection:
    """The connection ``conn_id``: from ``TAILRACE_CONN_<ID>`` if set, else from the
    runtime's source (the metadata database, through the worker's owner).

    Raises :class:`~tailrace.sdk.errors.ConnectionNotFoundError` when neither has it.
    Blocking: from async code (a trigger) use :func:`aget_connection`.
    """
    env_var = env_var_name(conn_id)
    uri = os.environ.get(env_var)
    if uri is None:
        source = _source
        uri = source(conn_id) if source is not None else None
    if uri is None:
        raise ConnectionNotFoundError(conn_id, env_var)
    conn = Connection.from_uri(conn_id, uri)
    _register_secrets(conn)
    return conn


async def aget_connection(conn_id: str) -> Connection:
    """:func:`get_connection` off the event loop (it may read the database)."""
    if env_var_name(conn_id) in os.environ:
        return get_connection(conn_id)
    return await asyncio.to_thread(get_connection, conn_id)
