"""What the two paged-API-to-database examples share: where the orders land, the
demo-API check, and the classic fetcher that defers once per page.

(A file whose name starts with ``_`` is not scanned for DAGs; the examples import it.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NoReturn

import httpx

from tailrace import BaseOperator, task
from tailrace.providers.http import HttpTrigger
from tailrace.sdk.connections import env_var_name, get_connection
from tailrace.sdk.errors import ConnectionNotFoundError

DEMO_API = "demo_api"
ORDERS_DB = "example_orders_db"
COLUMNS = ["id", "customer", "amount", "currency", "created_at"]
CREATE_ORDERS = (
    "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, "
    "amount NUMERIC, currency TEXT, created_at TEXT)"
)
CURSOR = {"style": "cursor", "path": "meta.next_cursor", "param": "cursor"}


def default_orders_db() -> None:
    """Unless ``TAILRACE_CONN_EXAMPLE_ORDERS_DB`` names another database, the orders go
    to ``example_orders.db`` in Tailrace's home (``$TAILRACE_HOME``, else ~/.tailrace).

    Runs when the DAG file is parsed, so the scheduler, the triggerer and every worker
    (each parses the file) agree on it.
    """
    home = Path(os.environ.get("TAILRACE_HOME") or Path.home() / ".tailrace").expanduser()
    os.environ.setdefault(env_var_name(ORDERS_DB), f"sqlite:///{home / 'example_orders.db'}")


@task.short_circuit
def demo_api_is_up() -> bool:
    try:
        url = get_connection(DEMO_API).base_url()
        httpx.get(f"{url}/stats", timeout=2).raise_for_status()
    except (ConnectionNotFoundError, httpx.HTTPError) as exc:
        print(f"skipping: the demo API is not reachable ({exc}); see this DAG's docstring")
        return False
    return True


class FetchPageByPage(BaseOperator):
    """Airflow's way through a paged API: defer for one page, resume on a worker with the
    response, keep the page, defer for the next. The pages collected so far travel in
    the deferral's kwargs; the task's output is the list of every page once the last
    one is in, so nothing downstream starts before then."""

    ui_color = "#f4a460"

    def __init__(self, *, http_conn_id: str, endpoint: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.http_conn_id = http_conn_id
        self.endpoint = endpoint

    def execute(self, context: Any) -> NoReturn:
        self.fetch(cursor=None, pages=[])

    def next_page(self, context: Any, event: dict[str, Any], pages: list[Any]) -> list[Any]:
        body = json.loads(event["text"])
        pages = [*pages, body["data"]["results"]]
        self.log.info("page %d: %d items", len(pages) - 1, len(pages[-1]))
        cursor = body["meta"]["next_cursor"]
        if not cursor:
            return pages
        self.fetch(cursor, pages)

    def fetch(self, cursor: str | None, pages: list[Any]) -> NoReturn:
        self.defer(
            trigger=HttpTrigger(
                self.endpoint,
                http_conn_id=self.http_conn_id,
                params={"cursor": cursor} if cursor else None,
            ),
            method_name="next_page",
            kwargs={"pages": pages},
        )
