"""Retention of finished runs' streams: kept for replay for a period, then removed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tailrace import DAG
from tailrace.db.models import Dag, Stream, StreamItem
from tailrace.sdk.errors import DagDefinitionError
from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

STREAMS = """
from datetime import datetime, timedelta
from tailrace import BaseTrigger, StartTriggerArgs, TriggerEvent, BaseOperator, dag


class Items(BaseTrigger):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def serialize(self):
        return (f"{__name__}.Items", {"n": self.n})

    async def run(self):
        for i in range(self.n):
            yield TriggerEvent(i)


class Produce(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls=f"{__name__}.Items", trigger_kwargs={"n": 30}
    )


@dag(schedule=None, start_date=datetime(2026, 1, 1), stream_retention=timedelta(0))
def short_lived():
    Produce(task_id="produce")


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def kept():
    Produce(task_id="produce")

short_lived()
kept()
"""


def test_a_dags_stream_retention_removes_its_finished_streams_and_others_are_kept(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("streams.py", STREAMS)
    harness.parse()
    with harness.engine.connect() as conn:
        assert dict(conn.execute(select(Dag.dag_id, Dag.stream_retention)).all()) == {
            "short_lived": 0.0,
            "kept": None,
        }
    short = harness.trigger("short_lived")
    kept = harness.trigger("kept")
    assert harness.run(short)["state"] == "success"
    assert harness.run(kept)["state"] == "success"
    assert harness.stream_items(kept, "produce") == list(range(30))

    def removed() -> bool:
        with harness.engine.connect() as conn:
            headers = conn.execute(
                select(Stream.task_instance_id, Stream.items_removed_at, Stream.length)
            ).all()
        return any(h.items_removed_at is not None for h in headers)

    with harness.running():
        wait_for(removed, timeout=30)
    with harness.engine.connect() as conn:
        gone = harness.task_instance(short, "produce").id
        header = conn.execute(select(Stream).where(Stream.task_instance_id == gone)).one()
        left = dict(
            conn.execute(
                select(Stream.task_instance_id, func.count(StreamItem.index))
                .outerjoin(StreamItem, StreamItem.stream_id == Stream.id)
                .group_by(Stream.task_instance_id)
            ).all()
        )
    # The header stays, to say when the items went and how many there were.
    assert header.length == 30 and header.closed and header.items_removed_at is not None
    assert left[gone] == 0
    assert left[harness.task_instance(kept, "produce").id] == 30
    assert harness.stream_items(kept, "produce") == list(range(30))


def test_stream_retention_must_be_a_duration() -> None:
    with pytest.raises(DagDefinitionError, match="stream_retention must not be negative"):
        DAG("negative", stream_retention=timedelta(seconds=-1))
    with pytest.raises(DagDefinitionError, match="stream_retention"):
        DAG("words", stream_retention="a week")  # type: ignore[arg-type]
    assert DAG("seconds", stream_retention=3600).stream_retention == timedelta(hours=1)
