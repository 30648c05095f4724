"""A paged API into a database, page by page as the pages arrive (``.iterate()``).

Run the demo API and name it as a connection first (otherwise every task is skipped;
``tailrace standalone`` starts one itself when no ``TAILRACE_CONN_DEMO_API`` is set):

    tailrace demo-api --latency 0.2 --page-size 100 --pages 20 &
    export TAILRACE_CONN_DEMO_API=http://127.0.0.1:8081
    tailrace dags test example_api_to_db_streaming

`fetch_orders` pages through `/orders/cursor` from the triggerer and streams each page
into its output (no worker). Every page gets its own `load_page` instance as soon as it
lands: page 0 is in the database while page 19 is still on its way. The rows go to
`example_orders.db` in Tailrace's home (or the database `TAILRACE_CONN_EXAMPLE_ORDERS_DB`
names), upserted on `id`, so a rerun or a retried page writes no duplicates.
The classic version of the same pipeline is example_api_to_db_classic.
"""

from __future__ import annotations

from datetime import datetime

from tailrace import dag
from tailrace.example_dags._orders_pipeline import (
    COLUMNS,
    CREATE_ORDERS,
    CURSOR,
    DEMO_API,
    ORDERS_DB,
    default_orders_db,
    demo_api_is_up,
)
from tailrace.providers.http import PaginatedHttpOperator
from tailrace.providers.sql import SQLExecuteQueryOperator, SQLInsertRowsOperator

default_orders_db()


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["example", "providers", "iterate"])
def example_api_to_db_streaming():
    create_table = SQLExecuteQueryOperator(
        task_id="create_table", conn_id=ORDERS_DB, sql=CREATE_ORDERS
    )
    fetch_orders = PaginatedHttpOperator(
        task_id="fetch_orders",
        http_conn_id=DEMO_API,
        endpoint="/orders/cursor",
        pagination=CURSOR,
        items_path="data.results",
        max_pending_events=8,  # backpressure: the pager waits when 8 pages wait for a load
    )
    load_page = SQLInsertRowsOperator.partial(
        task_id="load_page", table="orders", key="id", conn_id=ORDERS_DB, columns=COLUMNS
    ).iterate(rows=fetch_orders.output)

    demo_api_is_up() >> [create_table, fetch_orders]
    create_table >> load_page


example_api_to_db_streaming()
