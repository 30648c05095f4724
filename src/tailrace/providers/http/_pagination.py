"""Pagination strategies: given a page's request and response, the next request (or none).

Pure functions of JSON-safe values, so a trigger can store the next request as its
checkpoint and a failover resumes mid-pagination.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from tailrace.providers.common import MISSING, extract
from tailrace.providers.errors import PageError
from tailrace.sdk.connections import mask_url

Style = Literal["link", "odata", "next_url", "cursor", "page", "offset", "none"]
STYLES: tuple[str, ...] = ("link", "odata", "next_url", "cursor", "page", "offset", "none")
# A page's request, as stored in a checkpoint: {"url": str, "params": {...}}.
PageRequest = dict[str, Any]


@dataclass(frozen=True)
class Pagination:
    """How to find the next page. Build it from a dict (``Pagination.of(...)``):

    - ``{"style": "link"}``: the RFC 8288 ``Link: <...>; rel="next"`` response header;
    - ``{"style": "odata"}``: the body's ``@odata.nextLink`` (Microsoft Graph, OData);
    - ``{"style": "next_url", "path": "links.next"}``: a next URL found in the body;
    - ``{"style": "cursor", "path": "meta.next_cursor", "param": "cursor"}``: a token in
      the body, sent back as the query parameter ``param``; stops when it is empty;
    - ``{"style": "page", "param": "page", "start": 1}``: page numbers until an empty page;
    - ``{"style": "offset", "param": "offset"}``: an offset advanced by each page's item
      count, until an empty page;
    - ``{"style": "none"}``: a single page.
    """

    style: Style = "link"
    path: str | None = None
    param: str | None = None
    start: int = 1

    @classmethod
    def of(cls, spec: Mapping[str, Any] | str | None) -> Pagination:
        if spec is None:
            return cls("none")
        if isinstance(spec, str):
            spec = {"style": spec}
        unknown = set(spec) - {"style", "path", "param", "start"}
        style = spec.get("style", "link")
        if unknown or style not in STYLES:
            raise ValueError(
                f"pagination {dict(spec)!r}: style must be one of {', '.join(STYLES)} and the "
                "only other keys are path, param and start"
            )
        defaults: dict[str, dict[str, Any]] = {
            "odata": {"path": "@odata.nextLink"},
            "cursor": {"param": "cursor"},
            "page": {"param": "page"},
            "offset": {"param": "offset", "start": 0},
        }
        merged = {**defaults.get(style, {}), **spec}
        pagination = cls(
            style=style,
            path=merged.get("path"),
            param=merged.get("param"),
            start=int(merged.get("start", 1)),
        )
        if style in ("next_url", "cursor") and not pagination.path:
            raise ValueError(f"pagination style {style!r} needs a 'path' into the response body")
        return pagination

    def first_request(self, url: str, params: Mapping[str, Any] | None) -> PageRequest:
        params = dict(params or {})
        if self.style in ("page", "offset") and self.param is not None:
            params.setdefault(self.param, self.start)
        return {"url": url, "params": params}

    def next_request(
        self, request: PageRequest, response: httpx.Response, body: Any, items: list[Any]
    ) -> PageRequest | None:
        """The request for the page after this one; ``None`` when this was the last."""
        if self.style == "none":
            return None
        if self.style == "link":
            link = response.links.get("next")
            target = link.get("url") if link else None
            return _absolute(response, target)
        if self.style in ("odata", "next_url"):
            target = extract(body, self.path)
            return _absolute(response, target if isinstance(target, str) else None)
        params = dict(request.get("params") or {})
        assert self.param is not None
        if self.style == "cursor":
            token = extract(body, self.path)
            if token is MISSING or token is None or token == "":
                return None
            params[self.param] = token
            return {"url": request["url"], "params": params}
        if not items:
            return None  # page and offset styles end at the first empty page
        current = int(params.get(self.param, self.start))
        params[self.param] = current + (1 if self.style == "page" else len(items))
        return {"url": request["url"], "params": params}


def _absolute(response: httpx.Response, target: str | None) -> PageRequest | None:
    if not target:
        return None
    # A next link carries its own query; relative links resolve against this page's URL.
    return {"url": str(response.request.url.join(target)), "params": {}}


def page_body(response: httpx.Response, page: int) -> Any:
    """The page's JSON body; :class:`PageError` naming the page when it is not JSON."""
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        excerpt = " ".join(response.text[:200].split())
        raise PageError(
            page=page,
            url=mask_url(str(response.request.url)),
            problem=f"is not JSON ({exc.msg if isinstance(exc, json.JSONDecodeError) else exc}; "
            f"content-type {response.headers.get('content-type')!r}): {excerpt!r}",
        ) from None


def page_items(body: Any, items_path: str | None, page: int, url: str) -> list[Any]:
    """The list at ``items_path`` in the page (the body itself when ``None``)."""
    items = extract(body, items_path)
    if isinstance(items, list):
        return items
    where = f"at items path {items_path!r}" if items_path else "as its body"
    if items is MISSING:
        keys = sorted(body) if isinstance(body, dict) else type(body).__name__
        problem = f"has no items {where} (its top level: {keys})"
    else:
        problem = f"has a {type(items).__name__}, not a list, {where}"
    raise PageError(page=page, url=url, problem=problem)
