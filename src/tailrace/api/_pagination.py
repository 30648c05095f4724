"""Cursor pagination: keyset queries, and cursors that are opaque to clients.

A cursor is the key of the last item served, tagged with the list it belongs to, in
URL-safe base64. Keyset pagination stays correct while rows are added (no skipped or
repeated items, unlike offsets) and costs an index seek however deep the page.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import TypeVar

from fastapi import Query

from tailrace.api.errors import BadRequest

T = TypeVar("T")
K = TypeVar("K", int, str)
Key = int | str

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
_INT64 = 2**63

Limit = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Items per page.")
Cursor = Query(
    None, max_length=2000, description="`next_cursor` of the previous page; omit for the first."
)


def encode_cursor(list_name: str, key: Key) -> str:
    raw = json.dumps([list_name, key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(list_name: str, cursor: str | None, kind: type[K]) -> K | None:
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        name, key = json.loads(raw)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise BadRequest("the cursor is not one this API issued", code="invalid_cursor") from None
    valid = (
        name == list_name
        and type(key) is kind
        and (not isinstance(key, int) or -_INT64 <= key < _INT64)
        and (not isinstance(key, str) or "\x00" not in key)
    )
    if not valid:
        raise BadRequest(
            f"the cursor does not belong to this list ({list_name})", code="invalid_cursor"
        )
    value: K = key
    return value


def page(
    list_name: str, rows: Sequence[T], limit: int, key: Callable[[T], Key]
) -> tuple[list[T], str | None]:
    """``rows`` were fetched with ``limit + 1``: the extra one says a next page exists."""
    if len(rows) <= limit:
        return list(rows), None
    items = list(rows[:limit])
    return items, encode_cursor(list_name, key(items[-1]))
