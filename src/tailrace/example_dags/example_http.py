"""The HTTP provider against the demo API: wait for it, call it, stream every page.

Run the demo API and name it as a connection first (otherwise every task is skipped):

    tailrace demo-api --latency 0.05 --error-rate 0.1 &
    export TAILRACE_CONN_DEMO_API=http://127.0.0.1:8081
    tailrace dags trigger example_http --wait

`fetch_orders` starts in the triggerer and streams one item per page into its output
(no worker), riding out the injected 429s and 500s; `summarise` reads that stream.
"""

from __future__ import annotations

from datetime import datetime

import httpx

from tailrace import dag, task
from tailrace.providers.http import HttpOperator, HttpSensorAsync, PaginatedHttpOperator
from tailrace.sdk.connections import get_connection
from tailrace.sdk.errors import ConnectionNotFoundError


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["example", "providers"])
def example_http():
    @task.short_circuit
    def demo_api_is_up() -> bool:
        try:
            url = get_connection("demo_api").base_url()
            httpx.get(f"{url}/stats", timeout=2).raise_for_status()
        except (ConnectionNotFoundError, httpx.HTTPError) as exc:
            print(f"skipping: the demo API is not reachable ({exc}); see this DAG's docstring")
            return False
        return True

    export_ready = HttpSensorAsync(
        task_id="export_ready",
        http_conn_id="demo_api",
        endpoint="/eventually/nightly-export",
        query={"after": 2},
        poke_interval=0.5,
        timeout=60,
    )
    first_page = HttpOperator(
        task_id="first_page",
        http_conn_id="demo_api",
        endpoint="/orders",
        query={"page": 1},
        response_filter=lambda response: [o["id"] for o in response.json()["items"]],
    )
    fetch_orders = PaginatedHttpOperator(
        task_id="fetch_orders",
        http_conn_id="demo_api",
        endpoint="/orders/cursor",
        pagination={"style": "cursor", "path": "meta.next_cursor", "param": "cursor"},
        items_path="data.results",
        retry_backoff=0.2,
    )

    @task
    def summarise(pages) -> dict:
        orders = [order for page in pages for order in page]
        return {"orders": len(orders), "total": round(sum(o["amount"] for o in orders), 2)}

    demo_api_is_up() >> export_ready >> [first_page, fetch_orders]
    summarise(fetch_orders.output)


example_http()
