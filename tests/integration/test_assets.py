"""Assets end to end: a producer's success emits events, consumers run when their
condition holds, each run records the events that started it, tasks read them."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tailrace.assets import list_assets, list_events, waiting_for
from tailrace.db.models import DagRun, ImportError_
from tailrace.testing import DagHarness, run_cli

WriteDag = Callable[[str, str], Path]

DAGS = """
import json
from datetime import datetime
from tailrace import Asset, AssetAlias, dag, task

OUT = {out!r}
orders = Asset("s3://shop/orders.csv", extra={{"owner": "sales"}})
prices = Asset(name="prices", uri="file:///data/prices.json")
report = Asset("report")


def note(**row):
    with open(OUT, "a") as f:
        f.write(json.dumps(row) + "\\n")


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def make_orders():
    @task(outlets=[orders])
    def write(*, outlet_events, dag_run):
        outlet_events[orders].extra = {{"rows": dag_run.conf.get("rows", 0)}}

    write()


make_orders()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def make_prices():
    @task(outlets=[prices])
    def write():
        pass

    write()


make_prices()


@dag(schedule=orders)
def summarise():
    @task(outlets=[report], inlets=[orders])
    def read(*, triggering_asset_events, inlet_events, dag_run):
        note(
            dag="summarise",
            run_type=dag_run.run_type,
            triggering=[e.extra["rows"] for e in triggering_asset_events[orders]],
            latest=inlet_events[orders][-1].extra,
            count=len(inlet_events[orders]),
        )

    read()


summarise()


@dag(schedule=report)
def publish():
    @task
    def go(*, triggering_asset_events):
        note(dag="publish", sources=[
            e.source_dag_id for events in triggering_asset_events.values() for e in events
        ])

    go()


publish()


@dag(schedule=orders & prices)
def both():
    @task
    def go(*, triggering_asset_events):
        note(dag="both", assets=sorted(a.name for a in triggering_asset_events))

    go()


both()


@dag(schedule=orders | prices)
def either():
    @task
    def go(*, triggering_asset_events):
        note(dag="either", assets=sorted(a.name for a in triggering_asset_events))

    go()


either()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def make_dynamic():
    @task(outlets=[AssetAlias("daily")])
    def write(*, outlet_events, dag_run):
        day = dag_run.conf["day"]
        alias = outlet_events[AssetAlias("daily")]
        alias.add(Asset(f"s3://shop/{{day}}.csv"), extra={{"day": day}})

    write()


make_dynamic()


@dag(schedule=AssetAlias("daily"))
def on_daily():
    @task
    def go(*, triggering_asset_events):
        note(dag="on_daily", uris=sorted(a.uri for a in triggering_asset_events))

    go()


on_daily()
"""


def notes(out: Path, dag: str | None = None) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [r for r in rows if dag is None or r["dag"] == dag]


def finished_runs(harness: DagHarness, dag_id: str) -> list[Any]:
    with harness.engine.connect() as conn:
        return conn.execute(
            select(DagRun.id, DagRun.run_type, DagRun.state)
            .where(DagRun.dag_id == dag_id, DagRun.state.in_(["success", "failed"]))
            .order_by(DagRun.id)
        ).all()


def run_until(harness: DagHarness, done: Callable[[], bool], what: str) -> None:
    harness.start()
    assert harness.scheduler.run_until(done, timeout=60), f"timed out waiting for {what}"


def test_a_producers_success_runs_its_consumers_down_a_chain(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "notes.jsonl"
    write_dag("assets.py", DAGS.format(out=str(out)))
    harness.parse()
    assert harness.trigger_and_run("make_orders", {"rows": 7})["state"] == "success"
    run_until(harness, lambda: len(finished_runs(harness, "publish")) == 1, "publish to run")
    (summary,) = notes(out, "summarise")
    assert summary == {
        "dag": "summarise",
        "run_type": "asset_triggered",
        "triggering": [7],
        "latest": {"rows": 7},
        "count": 1,
    }
    assert notes(out, "publish") == [{"dag": "publish", "sources": ["summarise"]}]
    (run,) = finished_runs(harness, "summarise")
    assert (run.run_type, run.state) == ("asset_triggered", "success")
    with harness.engine.connect() as conn:
        (started_by,) = list_events(conn, dag_run_id=run.id)
        assets = {a["name"]: a for a in list_assets(conn)}
    assert (started_by["asset"], started_by["extra"]) == ("s3://shop/orders.csv", {"rows": 7})
    assert (started_by["source_dag_id"], started_by["source_task_id"]) == ("make_orders", "write")
    assert assets["s3://shop/orders.csv"]["producers"] == ["make_orders.write"]
    assert assets["s3://shop/orders.csv"]["consumers"] == ["both", "either", "summarise"]
    assert assets["s3://shop/orders.csv"]["extra"] == {"owner": "sales"}


def test_and_waits_for_every_asset_or_for_any(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "notes.jsonl"
    write_dag("assets.py", DAGS.format(out=str(out)))
    harness.parse()
    harness.trigger_and_run("make_orders", {"rows": 1})
    run_until(harness, lambda: len(finished_runs(harness, "either")) == 1, "either to run")
    assert notes(out, "either") == [{"dag": "either", "assets": ["s3://shop/orders.csv"]}]
    assert finished_runs(harness, "both") == []
    with harness.engine.connect() as conn:
        waiting = waiting_for(conn, "both")
    assert waiting is not None
    assert waiting["missing"] == ["prices"]
    assert waiting["queued_events"] == 1
    # A second orders event before prices: the run, when it comes, has both.
    harness.trigger_and_run("make_orders", {"rows": 2})
    harness.trigger_and_run("make_prices")
    run_until(harness, lambda: len(finished_runs(harness, "both")) == 1, "both to run")
    assert notes(out, "both") == [{"dag": "both", "assets": ["prices", "s3://shop/orders.csv"]}]
    (run,) = finished_runs(harness, "both")
    with harness.engine.connect() as conn:
        events = list_events(conn, dag_run_id=run.id)
        assert waiting_for(conn, "both")["missing"] == ["s3://shop/orders.csv", "prices"]  # type: ignore[index]
    assert sorted(e["asset"] for e in events) == [
        "prices",
        "s3://shop/orders.csv",
        "s3://shop/orders.csv",
    ]


def test_an_alias_resolves_to_the_assets_a_task_adds(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "notes.jsonl"
    write_dag("assets.py", DAGS.format(out=str(out)))
    harness.parse()
    harness.trigger_and_run("make_dynamic", {"day": "2026-12-01"})
    run_until(harness, lambda: len(finished_runs(harness, "on_daily")) == 1, "on_daily to run")
    assert notes(out, "on_daily") == [{"dag": "on_daily", "uris": ["s3://shop/2026-12-01.csv"]}]
    with harness.engine.connect() as conn:
        (event,) = list_events(conn, asset="s3://shop/2026-12-01.csv")
    assert event["source_alias_name"] == "daily"
    assert event["extra"] == {"day": "2026-12-01"}


def test_a_failed_producer_emits_no_event(harness: DagHarness, write_dag: WriteDag) -> None:
    write_dag(
        "fails.py",
        """
        from datetime import datetime
        from tailrace import Asset, dag, task

        @dag(schedule=None, start_date=datetime(2026, 1, 1))
        def broken_producer():
            @task(outlets=[Asset("never")])
            def write():
                raise ValueError("no")

            write()

        broken_producer()
        """,
    )
    harness.parse()
    assert harness.trigger_and_run("broken_producer")["state"] == "failed"
    with harness.engine.connect() as conn:
        assert list_events(conn, asset="never") == []


def test_bad_assets_are_import_errors_naming_them(harness: DagHarness, write_dag: WriteDag) -> None:
    write_dag(
        "bad_uri.py",
        """
        from tailrace import Asset, dag

        @dag(schedule=Asset("airflow://reserved"))
        def bad_uri():
            pass

        bad_uri()
        """,
    )
    write_dag(
        "unknown_ref.py",
        """
        from tailrace import Asset, dag

        @dag(schedule=Asset.ref(name="nobody-defines-this") | Asset("known"))
        def unknown_ref():
            pass

        unknown_ref()
        """,
    )
    harness.parse()
    with harness.engine.connect() as conn:
        errors = {Path(r.filename).name: r.message for r in conn.execute(select(ImportError_))}
    assert "'airflow://reserved'" in errors["bad_uri.py"]
    assert "reserved" in errors["bad_uri.py"]
    assert "Asset.ref(name='nobody-defines-this')" in errors["unknown_ref.py"]
    assert "DAG 'unknown_ref'" in errors["unknown_ref.py"]


def test_the_cli_lists_assets_and_events_at_80_columns_and_as_json(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path, database_url: str
) -> None:
    out = tmp_path / "notes.jsonl"
    write_dag("assets.py", DAGS.format(out=str(out)))
    harness.parse()
    harness.trigger_and_run("make_orders", {"rows": 3})
    env = {
        **os.environ,
        "TAILRACE_HOME": str(tmp_path / "home"),
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": harness.dags_folder,
        "COLUMNS": "80",
    }
    listed = run_cli(env, "assets", "list")
    assert listed.returncode == 0, listed.stderr
    assert max(len(line) for line in listed.stdout.splitlines()) <= 80
    assert "prices" in listed.stdout and "make_orders.write" in listed.stdout
    as_json = json.loads(run_cli(env, "assets", "list", "--json").stdout)
    orders = next(a for a in as_json if a["name"] == "s3://shop/orders.csv")
    assert (orders["events"], orders["producers"]) == (1, ["make_orders.write"])
    shown = run_cli(env, "assets", "events", "--asset", "s3://shop/orders.csv")
    assert shown.returncode == 0, shown.stderr
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80
    assert "make_orders.write" in shown.stdout
    (event,) = json.loads(
        run_cli(env, "assets", "events", "--asset", "s3://shop/orders.csv", "--json").stdout
    )
    assert (event["extra"], event["source_dag_id"]) == ({"rows": 3}, "make_orders")


def test_a_reference_resolves_once_a_dag_defines_the_asset(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "consumer.py",
        """
        from tailrace import Asset, dag

        @dag(schedule=Asset.ref(name="later"))
        def waits_for_later():
            pass

        waits_for_later()
        """,
    )
    assert harness.parse().import_errors == 1
    write_dag(
        "producer.py",
        """
        from datetime import datetime
        from tailrace import Asset, dag, task

        @dag(schedule=None, start_date=datetime(2026, 1, 1))
        def makes_later():
            @task(outlets=[Asset("later")])
            def make():
                pass

            make()

        makes_later()
        """,
    )
    report = harness.parse()
    assert (report.import_errors, report.dags) == (0, 2)
    harness.trigger_and_run("makes_later")
    run_until(harness, lambda: len(finished_runs(harness, "waits_for_later")) == 1, "the consumer")
