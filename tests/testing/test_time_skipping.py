"""The time-skipping harness: real scheduler, triggerer and worker runtime on a virtual clock."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from tailrace import clock
from tailrace.config import EXAMPLE_DAGS_FOLDER
from tailrace.db.models import TaskInstanceHistory
from tailrace.example_dags._paged_api import PagedApiTrigger
from tailrace.testing import EventRecording, RecordedEvent, StuckError, TimeSkippingHarness

START = datetime(2026, 3, 2, tzinfo=UTC)
Open = Callable[..., TimeSkippingHarness]

WAITING_DAGS = """
from datetime import UTC, datetime, timedelta

from tailrace import DAG, task
from tailrace.sdk.sensors import TimeDeltaSensor, TimeDeltaSensorAsync

with DAG("day_long", schedule=None):
    wait = TimeDeltaSensorAsync(task_id="wait_a_day", delta=timedelta(hours=24))

    @task(retries=3, retry_delay=timedelta(minutes=10))
    def flaky(ti=None):
        if ti.try_number < 3:
            raise RuntimeError(f"try {ti.try_number} fails")
        return {"tries": ti.try_number}

    wait >> flaky()

with DAG(
    "daily", schedule="0 6 * * *", start_date=datetime(2026, 3, 1, tzinfo=UTC), catchup=False
):
    @task
    def stamp(ds=None):
        return ds

    stamp()

with DAG("poking", schedule=None):
    TimeDeltaSensor(task_id="poke", delta=timedelta(hours=2), poke_interval=1800)
"""


@pytest.fixture
def dags(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "waiting.py").write_text(WAITING_DAGS)
    return folder


def test_a_day_long_sensor_and_retries_ten_minutes_apart_run_on_virtual_time(
    time_skipping: Open, dags: Path
) -> None:
    env = time_skipping(dags, start=START)
    run = env.trigger("day_long")
    env.run(run)
    env.assert_run_state(run, "success")
    env.assert_task_states(run, {"wait_a_day": "success", "flaky": "success"})
    env.assert_xcom(run, "flaky", {"tries": 3})
    # The sensor fired after exactly a day, each retry exactly ten minutes after a failure.
    assert env.now == START + timedelta(hours=24, minutes=20)
    flaky = env.task_instance(run, "flaky")
    with env.engine.connect() as conn:
        tries = conn.execute(
            select(TaskInstanceHistory.try_number, TaskInstanceHistory.start_date)
            .where(TaskInstanceHistory.task_instance_id == flaky.id)
            .order_by(TaskInstanceHistory.try_number)
        ).all()
    assert [n for n, _ in tries] == [1, 2, 3]
    assert [s for _, s in tries] == [
        START + timedelta(hours=24),
        START + timedelta(hours=24, minutes=10),
        START + timedelta(hours=24, minutes=20),
    ]


def test_a_week_of_cron_runs_comes_in_one_call(time_skipping: Open, dags: Path) -> None:
    env = time_skipping(dags, start=START)
    env.advance(timedelta(days=7))
    runs = env.runs("daily")
    # catchup=False: the interval that ended before the start is run; then one a day.
    assert [env.xcom(r, "stamp") for r in runs] == [f"2026-03-{d:02d}" for d in range(1, 9)]
    for run in runs:
        env.assert_run_state(run, "success")
    assert env.now == START + timedelta(days=7)


def test_a_poke_mode_sensor_sleeps_on_the_virtual_clock(time_skipping: Open, dags: Path) -> None:
    env = time_skipping(dags, start=START)
    run = env.trigger_and_run("poking")
    env.assert_task_states(run, {"poke": "success"})
    assert env.now == START + timedelta(hours=2)


def test_task_code_sees_the_virtual_clock_and_the_system_clock_comes_back(dags: Path) -> None:
    with TimeSkippingHarness(dags, start=START) as env:
        assert clock.utcnow() == START
        env.advance(timedelta(hours=5))
        assert clock.utcnow() == START + timedelta(hours=5)
    assert abs(clock.utcnow() - datetime.now(UTC)) < timedelta(minutes=1)


def test_a_streaming_trigger_and_lazy_expansion_run_inline(time_skipping: Open) -> None:
    env = time_skipping(EXAMPLE_DAGS_FOLDER / "example_streaming.py", start=START)
    # A page a minute: the pager's asyncio.sleep runs on the virtual clock.
    run = env.trigger_and_run("example_streaming", {"pages": 6, "page_latency": 60})
    env.assert_task_states(run, {"fetch_pages": "success", "report": "success"})
    pages = env.stream_items(run, "fetch_pages")
    assert [p["page"] for p in pages] == list(range(6))
    total = sum(row["value"] for page in pages for row in page["rows"])
    env.assert_xcom(run, "report", {"pages": 6, "total": total})
    assert timedelta(minutes=6) <= env.now - START < timedelta(minutes=7)


def test_a_synthetic_event_stream_replaces_the_trigger(time_skipping: Open) -> None:
    env = time_skipping(EXAMPLE_DAGS_FOLDER / "example_streaming.py", start=START)
    pages = [{"page": i, "rows": [{"value": 10 * i}]} for i in range(3)]
    env.feed(PagedApiTrigger, EventRecording.synthetic(pages, every=timedelta(hours=1)))
    # The real trigger would fetch 50 pages; the recording has three, an hour apart.
    run = env.trigger_and_run("example_streaming", {"pages": 50})
    env.assert_xcom(run, "report", {"pages": 3, "total": 30})
    assert timedelta(hours=2) <= env.now - START < timedelta(hours=2, minutes=1)


def test_a_recorded_stream_is_saved_loaded_and_replayed(
    time_skipping: Open, tmp_path: Path
) -> None:
    # Recorded from the real trigger (in real time: no latency), then replayed.
    recording = asyncio.run(EventRecording.record(PagedApiTrigger(pages=4, latency=0)))
    assert [e.payload["page"] for e in recording.events] == [0, 1, 2, 3]
    path = tmp_path / "pages.jsonl"
    recording.save(path)
    loaded = EventRecording.load(path)
    assert [e.payload for e in loaded.events] == [e.payload for e in recording.events]

    env = time_skipping(EXAMPLE_DAGS_FOLDER / "example_streaming.py", start=START)
    env.feed("PagedApiTrigger", loaded)
    run = env.trigger_and_run("example_streaming", {"pages": 50})
    totals = sum(sum(r["value"] for r in e.payload["rows"]) for e in recording.events)
    env.assert_xcom(run, "report", {"pages": 4, "total": totals})


def test_recordings_must_come_in_order() -> None:
    with pytest.raises(ValueError, match="in order"):
        EventRecording([RecordedEvent(5, "late"), RecordedEvent(1, "early")])


FOREVER = """
import asyncio
from datetime import timedelta

from tailrace import BaseOperator, BaseTrigger, DAG, TriggerEvent


class Never(BaseTrigger):
    def serialize(self):
        return f"{type(self).__module__}.Never", {}

    async def run(self):
        await asyncio.Event().wait()
        yield TriggerEvent("never")


class WaitForever(BaseOperator):
    def __init__(self, limit=None, **kwargs):
        super().__init__(**kwargs)
        self.limit = limit

    def execute(self, context):
        self.defer(trigger=Never(), method_name="done", timeout=self.limit)

    def done(self, context, event=None):
        return event


with DAG("forever", schedule=None):
    WaitForever(task_id="wait")

with DAG("an_hour", schedule=None):
    WaitForever(task_id="wait", limit=timedelta(hours=1))
"""


def test_a_run_that_can_never_finish_is_reported_not_waited_for(
    time_skipping: Open, tmp_path: Path
) -> None:
    path = tmp_path / "forever.py"
    path.write_text(FOREVER)
    env = time_skipping(path, start=START)
    run = env.trigger("forever")
    with pytest.raises(StuckError, match="no timer is set"):
        env.run(run)
    env.assert_task_states(run, {"wait": "deferred"})


def test_a_deferral_timeout_fires_on_the_virtual_clock(time_skipping: Open, tmp_path: Path) -> None:
    path = tmp_path / "forever.py"
    path.write_text(FOREVER)
    env = time_skipping(path, start=START)
    run = env.trigger_and_run("an_hour")
    env.assert_task_states(run, {"wait": "failed"})
    assert env.now == START + timedelta(hours=1)


def test_within_bounds_the_virtual_time_a_run_may_take(time_skipping: Open, dags: Path) -> None:
    env = time_skipping(dags, start=START)
    run = env.trigger("day_long")
    with pytest.raises(TimeoutError, match="virtual time"):
        env.run(run, within=timedelta(hours=3))
    assert env.now <= START + timedelta(hours=3)


def test_assertions_say_what_differs_and_show_the_errors(time_skipping: Open, dags: Path) -> None:
    env = time_skipping(dags, start=START)
    run = env.trigger_and_run("day_long")
    with pytest.raises(AssertionError, match=r"flaky is 'success' \(expected 'failed'\)"):
        env.assert_task_states(run, {"flaky": "failed"})
    with pytest.raises(AssertionError, match="is 'success', expected 'failed'"):
        env.assert_run_state(run, "failed")
    with pytest.raises(AssertionError, match=r"XCom 'return_value' of 'flaky' is \{'tries': 3\}"):
        env.assert_xcom(run, "flaky", {"tries": 1})


NETWORK = """
import asyncio

from tailrace import BaseOperator, BaseTrigger, DAG, TriggerEvent


class AskServer(BaseTrigger):
    def __init__(self, port):
        super().__init__()
        self.port = port

    def serialize(self):
        return f"{type(self).__module__}.AskServer", {"port": self.port}

    async def run(self):
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        answer = await reader.readline()
        writer.close()
        yield TriggerEvent(answer.decode().strip())


class Ask(BaseOperator):
    def __init__(self, port, **kwargs):
        super().__init__(**kwargs)
        self.port = port

    def execute(self, context):
        self.defer(trigger=AskServer(self.port), method_name="done")

    def done(self, context, event=None):
        return event


with DAG("network", schedule=None):
    Ask(task_id="ask", port=PORT)
"""


def test_a_trigger_waiting_on_a_real_socket_is_waited_for_in_real_time(
    time_skipping: Open, tmp_path: Path
) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    answered = threading.Event()

    def answer_late() -> None:
        conn, _ = server.accept()
        with conn:
            # The trigger's socket has nothing to read for a while: no timer is due either.
            answered.wait(0.3)
            conn.sendall(b"pong\n")

    thread = threading.Thread(target=answer_late, daemon=True)
    thread.start()
    path = tmp_path / "network.py"
    path.write_text(NETWORK.replace("PORT", str(server.getsockname()[1])))
    env = time_skipping(path, start=START)
    run = env.trigger_and_run("network")
    thread.join(timeout=10)
    server.close()
    env.assert_xcom(run, "ask", "pong")
