"""aiobotocore clients made from a Tailrace connection of type ``aws``:
``aws://ACCESS_KEY_ID:SECRET@/?region_name=eu-west-1&endpoint_url=http%3A%2F%2F...``
(login and password the key pair; extras ``region_name``, ``endpoint_url`` — an
S3/SQS-compatible server such as moto's or MinIO — and ``aws_session_token``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tailrace.providers.errors import ProviderError
from tailrace.sdk.connections import Connection, aget_connection

EXTRAS = frozenset({"region_name", "endpoint_url", "aws_session_token"})


def client_options(conn: Connection, *, region_name: str | None = None) -> dict[str, Any]:
    """The keyword arguments of ``AioSession.create_client`` for ``conn``."""
    if conn.conn_type != "aws":
        raise ProviderError(
            f"connection {conn.conn_id!r} is of type {conn.conn_type!r}, not 'aws'",
            hint="Write it as aws://ACCESS_KEY_ID:SECRET@/?region_name=...",
        )
    unknown = sorted(set(conn.extra) - EXTRAS)
    if unknown:
        raise ProviderError(
            f"connection {conn.conn_id!r} has extras Tailrace does not support: "
            + ", ".join(unknown),
            hint="Supported: " + ", ".join(sorted(EXTRAS)) + ".",
        )
    options: dict[str, Any] = {
        "region_name": region_name or conn.extra.get("region_name") or "us-east-1",
        "endpoint_url": conn.extra.get("endpoint_url") or None,
        "aws_session_token": conn.extra.get("aws_session_token") or None,
    }
    if conn.login:
        options["aws_access_key_id"] = conn.login
        options["aws_secret_access_key"] = conn.password or ""
    return options


@asynccontextmanager
async def aws_client(
    service: str,
    aws_conn_id: str,
    *,
    region_name: str | None = None,
    verify: bool | str | None = None,
) -> AsyncIterator[Any]:
    """An aiobotocore client of ``service`` ("s3", "sqs") for connection ``aws_conn_id``."""
    from aiobotocore.session import get_session

    options = client_options(await aget_connection(aws_conn_id), region_name=region_name)
    if verify is not None:
        options["verify"] = verify
    async with get_session().create_client(service, **options) as client:
        yield client
