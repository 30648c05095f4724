"""Strict JSON at the API's edge, and request errors that name the field in plain words.

Python's ``json`` accepts ``NaN``, ``Infinity`` and ``1e999`` (which become floats no
JSON column or client can hold) and lone UTF-16 surrogates (``"\\ud800"``, which no
database encoding can store). Every route parses its body here instead: such a value is
a 422 naming where in the body it is.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from tailrace.api.models import ID_PATTERN, RUN_ID_PATTERN, TEXT_PATTERN

_SOURCES = {"path": "path parameter", "query": "query parameter", "header": "header"}
# What each pattern of the OpenAPI document means, for people.
_PATTERN_WORDS = {
    ID_PATTERN: "may hold only letters, digits, '_', '.' and '-'",
    RUN_ID_PATTERN: "may not hold control characters, '/' or '\\'",
    TEXT_PATTERN: "may not hold NUL characters",
}


class InvalidJson(HTTPException):
    """A body that is not strict JSON; ``loc`` is where, as in a validation error."""

    def __init__(self, loc: Sequence[str | int], message: str, kind: str) -> None:
        super().__init__(422, f"{field_name(loc)}: {message}")
        self.loc = list(loc)
        self.kind = kind
        self.message = message


class _NotFinite:
    def __init__(self, text: str) -> None:
        self.text = text


def _number(text: str) -> float | _NotFinite:
    value = float(text)
    return value if math.isfinite(value) else _NotFinite(text)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # over Python's digit limit: no database column holds it either
        raise InvalidJson(
            ["body"], "holds an integer of more than 4300 digits", "int_too_long"
        ) from None


def loads_strict(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidJson(
            ["body"], f"is not UTF-8 (byte {exc.start} is {body[exc.start]:#04x})", "utf8_invalid"
        ) from None
    value = json.loads(text, parse_constant=_NotFinite, parse_float=_number, parse_int=_integer)
    _check(value, ["body"])
    return value


def _check(value: Any, loc: list[str | int]) -> None:
    if isinstance(value, _NotFinite):
        raise InvalidJson(
            loc, f"{value.text} is not a finite number; JSON numbers must be finite", "not_finite"
        )
    if isinstance(value, str):
        _check_text(value, loc)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, loc)
            _check(item, [*loc, key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check(item, [*loc, index])


def _check_text(text: str, loc: list[str | int]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidJson(
            loc,
            f"holds a lone UTF-16 surrogate (\\u{ord(text[exc.start]):04x}), which is not "
            "valid Unicode",
            "unicode_invalid",
        ) from None


class _StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_strict(await self.body())
        return self._json


def _on_a_thread(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(endpoint)
    async def call(*args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(endpoint, *args, **kwargs)

    return call


class StrictJsonRoute(APIRoute):
    """A route whose JSON body is parsed by :func:`loads_strict`, and whose plain
    function goes to a thread once per request."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        # FastAPI runs a plain function on the thread pool, and then its answer's
        # validation there too: two waits for a thread per request. Wrapped, the
        # function alone goes to a thread; its answer is checked on the loop (cheap: the
        # handlers return the response models themselves).
        if not (
            inspect.iscoroutinefunction(endpoint)
            or inspect.isgeneratorfunction(endpoint)
            or inspect.isasyncgenfunction(endpoint)
        ):
            endpoint = _on_a_thread(endpoint)
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(_StrictJsonRequest(request.scope, request.receive))

        return strict_handler


def field_name(loc: Sequence[str | int]) -> str:
    """``conf.rows[3]``, ``query parameter limit``, ``the request body``."""
    source, *rest = [*loc] or ["body"]
    if source == "body":
        # A JSON syntax error's loc ends in the character position, not a field.
        rest = [] if len(rest) == 1 and isinstance(rest[0], int) else rest
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest).lstrip(".")
    if source in _SOURCES:
        return f"{_SOURCES[source]} {path}"
    return path or "the request body"


def plain_message(error: dict[str, Any]) -> str:
    """A pydantic error's message, with patterns and JSON positions put in words."""
    kind, ctx = error.get("type"), error.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return _PATTERN_WORDS.get(pattern, f"does not have the expected form ({pattern})")
    if kind == "json_invalid":
        loc = error.get("loc", ())
        position = loc[-1] if loc and isinstance(loc[-1], int) else None
        where = "" if position is None else f" at character {position}"
        return f"is not valid JSON{where}: {ctx.get('error', 'decode error')}"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a field of this request; check the API documentation (/docs)"
    return str(error.get("msg", "is invalid"))
