"""HttpPaginationTrigger against real servers: every strategy, checkpoints, bad pages."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tailrace.demo_api import DemoApiConfig, order, running_demo_api
from tailrace.providers.http import HttpPaginationTrigger, PageError, Pagination
from tailrace.sdk.triggers import TriggerEvent

from .conftest import Reply, ScriptedServer, Seen


def events(trigger: HttpPaginationTrigger) -> list[TriggerEvent]:
    async def collect() -> list[TriggerEvent]:
        return [event async for event in trigger.run()]

    return asyncio.run(collect())


def ids(pages: list[Any]) -> list[list[int]]:
    return [[item["id"] for item in page] for page in pages]


EXPECTED = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]]


@pytest.mark.parametrize(
    ("endpoint", "pagination", "items_path", "pages_fetched"),
    [
        ("/orders/link", "link", None, 5),
        ("/orders/odata", "odata", "value", 5),
        ("/orders/cursor", {"style": "cursor", "path": "meta.next_cursor"}, "data.results", 5),
        ("/orders", {"style": "page", "param": "page"}, "items", 6),  # and the empty page
        ("/orders/offset", {"style": "offset", "param": "offset"}, "items", 6),
    ],
)
def test_every_strategy_pages_through_the_demo_api_once_each(
    demo_api: str, endpoint: str, pagination: Any, items_path: str | None, pages_fetched: int
) -> None:
    trigger = HttpPaginationTrigger(
        endpoint,
        http_conn_id=None,
        base_url=demo_api,
        pagination=pagination,
        items_path=items_path,
        params={"limit": 4} if "offset" in endpoint else None,
    )
    got = events(trigger)
    assert ids([e.payload for e in got]) == EXPECTED  # no event for a final empty page
    served = httpx.get(f"{demo_api}/stats").json()["requests"]
    assert sum(served.values()) == pages_fetched
    assert all(count == 1 for count in served.values()), served
    # The last event's checkpoint says there is nothing left (page and offset styles
    # only learn that from the empty page after it, which is no event).
    if pages_fetched == 5:
        assert got[-1].checkpoint["next"] is None


def test_link_headers_may_be_relative_and_the_checkpoint_is_the_next_request(
    server: ScriptedServer,
) -> None:
    def page(seen: Seen) -> Reply:
        n = int(seen.query.get("p", "0"))
        headers = {"Link": f'</things?p={n + 1}>; rel="next", </things?p=0>; rel="first"'}
        return Reply(200, {"things": [n]}, headers if n < 2 else {})

    server.route("/things", page)
    got = events(
        HttpPaginationTrigger(
            "/things", http_conn_id=None, base_url=server.url, items_path="things"
        )
    )
    assert [e.payload for e in got] == [[0], [1], [2]]
    assert got[0].checkpoint == {
        "next": {"url": f"{server.url}/things?p=1", "params": {}},
        "page": 1,
    }


def test_a_resumed_trigger_starts_at_its_checkpoint_and_fetches_no_earlier_page() -> None:
    with running_demo_api(DemoApiConfig(page_size=4, pages=5)) as url:
        first = events(
            HttpPaginationTrigger(
                "/orders/cursor",
                http_conn_id=None,
                base_url=url,
                pagination={"style": "cursor", "path": "meta.next_cursor"},
                items_path="data.results",
            )
        )
    with running_demo_api(DemoApiConfig(page_size=4, pages=5)) as url:
        resumed = HttpPaginationTrigger(
            "/orders/cursor",
            http_conn_id=None,
            base_url=url,
            pagination={"style": "cursor", "path": "meta.next_cursor"},
            items_path="data.results",
        )
        # As the triggerer does after a failover: the checkpoint of the last durable event.
        resumed.checkpoint = first[1].checkpoint
        again = events(resumed)
        served = httpx.get(f"{url}/stats").json()["requests"]
    assert ids([e.payload for e in again]) == EXPECTED[2:]
    assert "/orders/cursor" not in served  # the first page was not fetched again
    assert len(served) == 3


def test_odata_next_links_and_the_page_payload(server: ScriptedServer) -> None:
    def graph(seen: Seen) -> Reply:
        skip = int(seen.query.get("$skip", "0"))
        body: dict[str, Any] = {"value": [{"id": skip}, {"id": skip + 1}]}
        if skip < 4:
            body["@odata.nextLink"] = f"{server.url}/users?$skip={skip + 2}"
        return Reply(200, body)

    server.route("/users", graph)
    got = events(
        HttpPaginationTrigger(
            "/users",
            http_conn_id=None,
            base_url=server.url,
            pagination="odata",
            items_path="value",
            payload="page",
        )
    )
    assert [e.payload["page"] for e in got] == [0, 1, 2]
    assert [e.payload["items"] for e in got][-1] == [{"id": 4}, {"id": 5}]
    assert got[1].payload["url"] == f"{server.url}/users?$skip=2"


def test_pages_go_on_through_429s_and_500s(server: ScriptedServer) -> None:
    replies = iter(
        [
            Reply(200, {"items": [1], "next": "c1"}),
            Reply(429, {}, {"Retry-After": "0"}),
            Reply(500, {}),
            Reply(200, {"items": [2], "next": None}),
        ]
    )
    server.route("/feed", lambda seen: next(replies))
    got = events(
        HttpPaginationTrigger(
            "/feed",
            http_conn_id=None,
            base_url=server.url,
            pagination={"style": "cursor", "path": "next", "param": "after"},
            items_path="items",
            hook_options={"retry_backoff": 0.01},
        )
    )
    assert [e.payload for e in got] == [[1], [2]]
    assert [s.query for s in server.seen] == [{}, {"after": "c1"}, {"after": "c1"}, {"after": "c1"}]


def cursor_pages(server: ScriptedServer, first: Reply, later: Reply) -> HttpPaginationTrigger:
    """A trigger paging through ``/p`` by the cursor ``c``: ``first`` answers the first
    request, ``later`` every one after it."""
    server.route("/p", lambda seen: first if "c" not in seen.query else later)
    return HttpPaginationTrigger(
        "/p",
        http_conn_id=None,
        base_url=server.url,
        pagination={"style": "cursor", "path": "next", "param": "c"},
        items_path="items",
    )


def test_a_page_that_is_not_json_names_the_page(server: ScriptedServer) -> None:
    trigger = cursor_pages(
        server,
        Reply(200, {"items": [1], "next": "x"}),
        Reply(200, "<html>maintenance</html>", {"Content-Type": "text/html"}),
    )
    with pytest.raises(PageError) as caught:
        events(trigger)
    assert caught.value.page == 1
    assert f"page 1 ({server.url}/p?c=x) is not JSON" in str(caught.value)
    assert "maintenance" in str(caught.value)


def test_a_page_without_the_items_path_names_the_page_and_path(server: ScriptedServer) -> None:
    server.script("/p", Reply(200, {"data": {"rows": []}}))
    trigger = HttpPaginationTrigger(
        "/p", http_conn_id=None, base_url=server.url, pagination=None, items_path="data.results"
    )
    with pytest.raises(
        PageError,
        match=r"page 0 \(.*/p\) has no items at items path "
        r"'data.results' \(its top level: \['data'\]\)",
    ):
        events(trigger)


def test_a_4xx_mid_pagination_fails_with_status_and_body(server: ScriptedServer) -> None:
    trigger = cursor_pages(
        server, Reply(200, {"items": [1], "next": "2"}), Reply(403, {"error": "token expired"})
    )
    with pytest.raises(Exception, match=r"GET .*/p\?c=2 returned 403: .*token expired"):
        events(trigger)


def test_max_pages_stops_early(demo_api: str) -> None:
    got = events(
        HttpPaginationTrigger("/orders/link", http_conn_id=None, base_url=demo_api, max_pages=2)
    )
    assert ids([e.payload for e in got]) == EXPECTED[:2]
    assert got[-1].checkpoint["next"] is None


def test_pagination_specs_are_checked() -> None:
    with pytest.raises(ValueError, match="style must be one of"):
        Pagination.of({"style": "scroll"})
    with pytest.raises(ValueError, match="needs a 'path'"):
        Pagination.of({"style": "cursor"})
    assert Pagination.of("odata").path == "@odata.nextLink"
    assert order(3) == order(3) and order(3)["id"] == 3
