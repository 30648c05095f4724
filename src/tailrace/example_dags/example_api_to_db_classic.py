"""The same pipeline as example_api_to_db_streaming, the classic (Airflow) way.

    tailrace demo-api --latency 0.2 --page-size 100 --pages 20 &
    export TAILRACE_CONN_DEMO_API=http://127.0.0.1:8081
    tailrace dags test example_api_to_db_classic

`fetch_orders` defers once per page: the triggerer sends the request, a worker resumes
the task with the response, keeps the page and defers for the next one — a worker start
per page. Only when the last page is in does `load_page` `.expand()` over the collected
list, one instance per page, all at once. Compare the two runs' Gantt charts (and
`benchmarks/bench_pipeline.py`): here the first row reaches the database after the
last page has been fetched.
"""

from __future__ import annotations

from datetime import datetime

from tailrace import dag
from tailrace.example_dags._orders_pipeline import (
    COLUMNS,
    CREATE_ORDERS,
    DEMO_API,
    ORDERS_DB,
    FetchPageByPage,
    default_orders_db,
    demo_api_is_up,
)
from tailrace.providers.sql import SQLExecuteQueryOperator, SQLInsertRowsOperator

default_orders_db()


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["example", "providers", "mapping"])
def example_api_to_db_classic():
    create_table = SQLExecuteQueryOperator(
        task_id="create_table", conn_id=ORDERS_DB, sql=CREATE_ORDERS
    )
    fetch_orders = FetchPageByPage(
        task_id="fetch_orders", http_conn_id=DEMO_API, endpoint="/orders/cursor"
    )
    load_page = SQLInsertRowsOperator.partial(
        task_id="load_page", table="orders", key="id", conn_id=ORDERS_DB, columns=COLUMNS
    ).expand(rows=fetch_orders.output)

    demo_api_is_up() >> [create_table, fetch_orders]
    create_table >> load_page


example_api_to_db_classic()
