"""The bundled streaming example is one pipeline: the pages `fetch_pages` streams are the
pages `summarise` consumes, and the run's `pages` param decides how many there are."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from tailrace.config import EXAMPLE_DAGS_FOLDER
from tailrace.db.models import XCom
from tailrace.testing import DagHarness


def mapped_results(engine: Engine, dag_run_id: int, task_id: str) -> list[object]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(XCom.value)
            .where(XCom.dag_run_id == dag_run_id, XCom.task_id == task_id)
            .where(XCom.key == "return_value")
            .order_by(XCom.map_index)
        )
        return [json.loads(value) for (value,) in rows]


@pytest.fixture
def harness(engine: Engine, tmp_path: Path) -> Iterator[DagHarness]:
    with DagHarness(engine, EXAMPLE_DAGS_FOLDER, log_folder=tmp_path / "logs") as h:
        h.parse()
        yield h


def test_the_pages_param_drives_one_stream_from_producer_to_consumer(
    harness: DagHarness,
) -> None:
    pk = harness.trigger("example_streaming", {"pages": 7, "page_latency": 0})
    assert harness.run(pk, timeout=120)["state"] == "success"

    pages = harness.stream_items(pk, "fetch_pages")
    assert [p["page"] for p in pages] == list(range(7))
    summaries = mapped_results(harness.engine, pk, "summarise")
    assert summaries == [
        {"page": p["page"], "total": sum(r["value"] for r in p["rows"])} for p in pages
    ]
    assert harness.xcom(pk, "report") == {
        "pages": 7,
        "total": sum(s["total"] for s in summaries),
    }
    # One worker run per batch of pages, not per page; the trigger's lines are in its log.
    log = harness.log(pk, "fetch_pages")
    assert 2 <= log.count("handling pages") < 7
    assert "fetched page 6" in log
