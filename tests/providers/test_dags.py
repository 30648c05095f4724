"""Provider tasks in real DAG runs: parser, scheduler, workers, triggerer, demo API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from tailrace.connections import add_connection
from tailrace.demo_api import DemoApiConfig, running_demo_api
from tailrace.providers.sql import SqlHook
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]


@pytest.fixture
def demo(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The demo API behind a bearer token, as the connection ``demo`` (an env variable)."""
    with running_demo_api(DemoApiConfig(page_size=4, pages=5, token="tok-sekrit-42")) as url:
        monkeypatch.setenv("TAILRACE_CONN_DEMO", url.replace("//", "//:tok-sekrit-42@"))
        yield url


def served(url: str) -> dict[str, int]:
    requests: dict[str, int] = httpx.get(f"{url}/stats").json()["requests"]
    return requests


def test_pages_stream_in_order_once_each_and_land_in_a_table_exactly_once(
    harness: DagHarness, write_dag: WriteDag, engine: Engine, demo: str, tmp_path: Path
) -> None:
    warehouse = f"sqlite:///{tmp_path / 'warehouse.db'}"
    SqlHook(url=warehouse).run(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, amount NUMERIC)"
    )
    # Stored in the metadata database: the worker asks its owner for it.
    add_connection(engine, "warehouse", warehouse)
    write_dag(
        "orders.py",
        """
        from datetime import datetime
        from tailrace import dag
        from tailrace.providers.http import PaginatedHttpOperator
        from tailrace.providers.sql import SQLInsertRowsOperator

        @dag(schedule=None, start_date=datetime(2026, 1, 1))
        def orders():
            fetch = PaginatedHttpOperator(
                task_id="fetch", http_conn_id="demo", endpoint="/orders/link", pagination="link"
            )
            SQLInsertRowsOperator(
                task_id="load", conn_id="warehouse", table="orders", key="id",
                rows=fetch.output, chunk_size=6, columns=["id", "customer", "amount"],
            )

        orders()
        """,
    )
    harness.parse()
    pk = harness.trigger("orders")
    assert harness.run(pk)["state"] == "success"
    pages = harness.stream_items(pk, "fetch")
    assert [[o["id"] for o in page] for page in pages] == [
        list(range(start, start + 4)) for start in range(1, 21, 4)
    ]
    # Each page fetched once, and the fetch used no worker.
    requests = served(demo)
    assert sum(requests.values()) == 5 and set(requests.values()) == {1}
    assert harness.task_instance(pk, "fetch").id not in harness.dispatched
    assert harness.xcom(pk, "load") == 20
    ids = [r["id"] for r in SqlHook(url=warehouse).get_records("SELECT id FROM orders")]
    assert sorted(ids) == list(range(1, 21))
    load_log = harness.log(pk, "load")
    assert "batch 4: 2 rows upserted into orders (20 in all)" in load_log
    fetch_log = harness.log(pk, "fetch")
    assert "page 4: 4 items from" in fetch_log
    assert "tok-sekrit-42" not in fetch_log + load_log


def test_an_async_http_sensor_logs_each_poke_and_frees_its_worker(
    harness: DagHarness, write_dag: WriteDag, demo: str
) -> None:
    write_dag(
        "sense.py",
        """
        from datetime import datetime
        from tailrace import dag
        from tailrace.providers.http import HttpSensorAsync

        @dag(schedule=None, start_date=datetime(2026, 1, 1))
        def sense():
            HttpSensorAsync(
                task_id="ready", http_conn_id="demo", endpoint="/eventually/job-1",
                query={"after": 2}, poke_interval=0.05, timeout=60,
            )

        sense()
        """,
    )
    harness.parse()
    pk = harness.trigger("sense")
    assert harness.run(pk)["state"] == "success"
    assert harness.xcom(pk, "ready") == {"key": "job-1", "ready": True, "after": 2}
    log = harness.log(pk, "ready")
    assert f"poke 1: GET {demo}/eventually/job-1?after=2 returned 404, waiting 0.05 s" in log
    assert "poke 2: GET" in log and "poke 3: GET" in log and "returned 200; done" in log


def test_http_operator_sync_and_deferred_and_a_4xx_failing_the_task(
    harness: DagHarness, write_dag: WriteDag, demo: str
) -> None:
    write_dag(
        "calls.py",
        """
        from datetime import datetime
        from tailrace import dag
        from tailrace.providers.http import HttpOperator

        @dag(schedule=None, start_date=datetime(2026, 1, 1))
        def calls():
            HttpOperator(task_id="sync", http_conn_id="demo", endpoint="/orders",
                         query={"page": "{{ 1 + 1 }}"},
                         response_filter=lambda r: [o["id"] for o in r.json()["items"]])
            HttpOperator(task_id="deferred", http_conn_id="demo", endpoint="/orders/odata",
                         deferrable=True)
            HttpOperator(task_id="missing", http_conn_id="demo", endpoint="/status/404")
            HttpOperator(task_id="missing_deferred", http_conn_id="demo",
                         endpoint="/status/403", deferrable=True)

        calls()
        """,
    )
    harness.parse()
    pk = harness.trigger("calls")
    harness.run(pk)
    states = harness.states(pk)
    assert states == {
        "sync": "success",
        "deferred": "success",
        "missing": "failed",
        "missing_deferred": "failed",
    }
    assert harness.xcom(pk, "sync") == [5, 6, 7, 8]
    assert [o["id"] for o in harness.xcom(pk, "deferred")["value"]] == [1, 2, 3, 4]
    log = harness.log(pk, "missing")
    assert f"GET {demo}/status/404 returned 404" in log
    assert "you asked for 404" in log
    error = harness.task_instance(pk, "missing_deferred").error
    assert f"HttpError: GET {demo}/status/403 returned 403" in error
    assert "tok-sekrit-42" not in error + log


def test_a_connection_from_the_database_reaches_the_worker_with_its_secret_masked(
    harness: DagHarness, write_dag: WriteDag, engine: Engine
) -> None:
    add_connection(engine, "vault", "https://robot:pa55-w0rd-xyz@vault.example.com:8200/v1")
    write_dag(
        "secret.py",
        """
        from datetime import datetime
        from tailrace import dag, task
        from tailrace.sdk.connections import get_connection

        @dag(schedule=None, start_date=datetime(2026, 1, 1))
        def secret():
            @task
            def peek():
                conn = get_connection("vault")
                print("the password is", conn.password)
                return {"host": conn.host, "port": conn.port, "schema": conn.schema}

            peek()

        secret()
        """,
    )
    harness.parse()
    pk = harness.trigger("secret")
    assert harness.run(pk)["state"] == "success"
    assert harness.xcom(pk, "peek") == {"host": "vault.example.com", "port": 8200, "schema": "v1"}
    log = harness.log(pk, "peek")
    assert "the password is ***" in log
    assert "pa55-w0rd-xyz" not in log


def test_an_async_sql_sensor_waits_in_the_triggerer_for_a_row(
    harness: DagHarness, write_dag: WriteDag, engine: Engine, tmp_path: Path
) -> None:
    target = f"sqlite:///{tmp_path / 'jobs.db'}"
    hook = SqlHook(url=target)
    hook.run(
        [
            "CREATE TABLE jobs (id INTEGER PRIMARY KEY, done INTEGER)",
            "INSERT INTO jobs VALUES (1, 1)",
        ]
    )
    add_connection(engine, "jobs_db", target)
    write_dag(
        "sql_sense.py",
        """
        from datetime import datetime
        from tailrace import dag
        from tailrace.providers.sql import SqlSensorAsync

        @dag(schedule=None, start_date=datetime(2026, 1, 1))
        def sql_sense():
            SqlSensorAsync(task_id="done", conn_id="jobs_db",
                           sql="SELECT COUNT(*) FROM jobs WHERE done = 1", poke_interval=0.05)

        sql_sense()
        """,
    )
    harness.parse()
    pk = harness.trigger("sql_sense")
    assert harness.run(pk)["state"] == "success"
    assert harness.xcom(pk, "done") == 1
    assert "poke 1: query on jobs_db returned 1; done" in harness.log(pk, "done")


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_the_bundled_example_runs_against_a_flaky_demo_api(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tailrace.config import EXAMPLE_DAGS_FOLDER

    flaky = DemoApiConfig(error_rate=0.2, retry_after=0, seed=7)
    with running_demo_api(flaky) as url:
        monkeypatch.setenv("TAILRACE_CONN_DEMO_API", url)
        with DagHarness(engine, EXAMPLE_DAGS_FOLDER, log_folder=tmp_path / "logs") as harness:
            harness.parse()
            pk = harness.trigger("example_http")
            assert harness.run(pk, timeout=120)["state"] == "success"
            assert set(harness.states(pk).values()) == {"success"}
            assert harness.xcom(pk, "summarise")["orders"] == 50
            assert harness.xcom(pk, "first_page") == list(range(1, 11))


def test_a_task_error_quoting_a_secret_is_stored_masked(
    harness: DagHarness, write_dag: WriteDag, engine: Engine
) -> None:
    add_connection(engine, "vault", "https://robot:pa55-w0rd-xyz@vault.example.com")
    write_dag(
        "leak.py",
        """
        from datetime import datetime
        from tailrace import dag, task
        from tailrace.sdk.connections import get_connection

        @dag(schedule=None, start_date=datetime(2026, 1, 1))
        def leak():
            @task(retries=0)
            def fail():
                raise RuntimeError(f"login with {get_connection('vault').password} refused")

            fail()

        leak()
        """,
    )
    harness.parse()
    pk = harness.trigger("leak")
    assert harness.run(pk)["state"] == "failed"
    error = harness.task_instance(pk, "fail").error
    assert "RuntimeError: login with *** refused" in error
    assert "pa55-w0rd-xyz" not in error + harness.log(pk, "fail")
