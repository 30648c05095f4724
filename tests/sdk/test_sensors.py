"""Sensors: poke and reschedule modes, timeouts, and the built-in (async) sensors."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import tailrace.clock
from tailrace.sdk import (
    DAG,
    BaseSensorOperator,
    DateTimeSensor,
    DateTimeSensorAsync,
    DateTimeTrigger,
    FileSensor,
    FileSensorAsync,
    FileTrigger,
    PokeReturnValue,
    SensorTimeout,
    SkipTask,
    TaskDeferred,
    TimeDeltaSensor,
    TimeDeltaSensorAsync,
)
from tailrace.sdk.errors import DagDefinitionError
from tailrace.sdk.execution import execute_task

START = datetime(2030, 1, 1, tzinfo=UTC)


class Clock:
    """Wall clock for the sensors; ``sleep`` advances it instead of blocking."""

    def __init__(self) -> None:
        self.now = START
        self.sleeps: list[float] = []

    def utcnow(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Iterator[Clock]:
    fake = Clock()
    # Looked up at each call: a test may swap the fake's sleep.
    with tailrace.clock.installed(lambda: fake.utcnow(), lambda s: fake.sleep(s)):
        yield fake


class CountingSensor(BaseSensorOperator):
    """Done on poke number ``done_on`` (never if 0)."""

    def __init__(self, *, done_on: int = 0, value: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.done_on = done_on
        self.value = value
        self.pokes = 0

    def poke(self, context: Any) -> bool | PokeReturnValue:
        self.pokes += 1
        done = self.pokes == self.done_on
        return PokeReturnValue(done, self.value) if self.value is not None else done


def sensor_dag(**kwargs: Any) -> tuple[DAG, CountingSensor]:
    with DAG("d") as d:
        sensor = CountingSensor(task_id="s", **kwargs)
    return d, sensor


# --- mode="poke" -------------------------------------------------------------------------


def test_poke_mode_pokes_until_done(runner: Any) -> None:
    """Really sleeps: a tiny poke_interval between three pokes."""
    d, _ = sensor_dag(done_on=3, poke_interval=0.001)
    r = runner(d)
    context = r.context("s")
    assert execute_task(d.get_task("s"), context) is None
    assert context["task"].pokes == 3
    assert r.store == {}


def test_poke_return_value_becomes_the_xcom(runner: Any, clock: Clock) -> None:
    d, _ = sensor_dag(done_on=2, value={"rows": 10}, poke_interval=5)
    r = runner(d)
    assert r.run("s") == {"rows": 10}
    assert r.xcom("s") == {"rows": 10}
    assert clock.sleeps == [5.0]
    assert bool(PokeReturnValue(True)) and not PokeReturnValue(False, "x")


def test_timeout_fails_without_retry(runner: Any, clock: Clock) -> None:
    d, _ = sensor_dag(poke_interval=4, timeout=10)
    with pytest.raises(SensorTimeout, match=r"Sensor 's' timed out.*within 10s"):
        runner(d).run("s")
    # Pokes at 0, 4, 8 and, with the last wait cut to the deadline, at 10.
    assert clock.sleeps == [4.0, 4.0, 2.0]


def test_soft_fail_skips_on_timeout(runner: Any, clock: Clock) -> None:
    d, _ = sensor_dag(poke_interval=1, timeout=timedelta(seconds=2), soft_fail=True)
    with pytest.raises(SkipTask, match="soft_fail"):
        runner(d).run("s")


def test_exponential_backoff_up_to_max_wait(runner: Any, clock: Clock) -> None:
    d, _ = sensor_dag(
        done_on=6, poke_interval=1, exponential_backoff=True, max_wait=timedelta(seconds=5)
    )
    runner(d).run("s")
    assert clock.sleeps == [1.0, 2.0, 4.0, 5.0, 5.0]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mode": "sometimes"}, "mode"),
        ({"poke_interval": -1}, "poke_interval"),
        ({"timeout": "soon"}, "timeout"),
    ],
)
def test_invalid_sensor_arguments(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(DagDefinitionError) as info:
        sensor_dag(**kwargs)
    assert (info.value.dag_id, info.value.task_id, info.value.field) == ("d", "s", field)


# --- mode="reschedule" -------------------------------------------------------------------


def test_reschedule_mode_defers_between_pokes(runner: Any, clock: Clock) -> None:
    d, _ = sensor_dag(mode="reschedule", poke_interval=30, timeout=100)
    r = runner(d)
    with pytest.raises(TaskDeferred) as info:
        r.run("s")
    deferred = info.value
    assert isinstance(deferred.trigger, DateTimeTrigger)
    assert deferred.trigger.moment == START + timedelta(seconds=30)
    assert deferred.method_name == "execute"
    assert deferred.kwargs == {"sensor_started": START.isoformat(), "poke_count": 1}
    assert clock.sleeps == []

    # The trigger fired 30 s later; the sensor resumes, still not done.
    clock.now += timedelta(seconds=30)
    with pytest.raises(TaskDeferred) as info:
        execute_task(
            d.get_task("s"),
            r.context("s"),
            next_method=deferred.method_name,
            next_kwargs={**deferred.kwargs, "event": deferred.trigger.moment.isoformat()},
        )
    assert info.value.kwargs == {"sensor_started": START.isoformat(), "poke_count": 2}
    assert info.value.trigger.moment == START + timedelta(seconds=60)  # type: ignore[attr-defined]


def test_reschedule_mode_counts_the_timeout_from_the_first_poke(runner: Any, clock: Clock) -> None:
    d, _ = sensor_dag(mode="reschedule", poke_interval=30, timeout=100)
    r = runner(d)
    clock.now = START + timedelta(seconds=90)
    with pytest.raises(TaskDeferred) as info:
        execute_task(
            d.get_task("s"),
            r.context("s"),
            next_method="execute",
            next_kwargs={"event": None, "sensor_started": START.isoformat(), "poke_count": 3},
        )
    # Only 10 s are left: the next poke is at the deadline, not 30 s later.
    assert info.value.trigger.moment == START + timedelta(seconds=100)  # type: ignore[attr-defined]
    clock.now = START + timedelta(seconds=100)
    with pytest.raises(SensorTimeout):
        execute_task(
            d.get_task("s"),
            r.context("s"),
            next_method="execute",
            next_kwargs={"event": None, **info.value.kwargs},
        )


def test_reschedule_mode_resumes_into_success(runner: Any, clock: Clock) -> None:
    d, _ = sensor_dag(mode="reschedule", done_on=1, value="found")
    r = runner(d)
    result = execute_task(
        d.get_task("s"),
        r.context("s"),
        next_method="execute",
        next_kwargs={"event": "x", "sensor_started": START.isoformat(), "poke_count": 4},
    )
    assert result == "found"
    assert r.xcom("s") == "found"


# --- time sensors ------------------------------------------------------------------------


def test_datetime_sensor_pokes_until_the_target(runner: Any, clock: Clock) -> None:
    with DAG("d") as d:
        DateTimeSensor(task_id="t", target_time=START + timedelta(seconds=150), poke_interval=60)
        DateTimeSensor(task_id="templated", target_time="{{ logical_date }}")
    r = runner(d)
    assert r.run("t") is None
    assert clock.sleeps == [60.0, 60.0, 60.0]
    assert d.get_task("t").target_time == "2030-01-01T00:02:30+00:00"  # type: ignore[attr-defined]
    assert r.run("templated") is None  # the logical date (2024) has passed


@pytest.mark.parametrize(
    "make",
    [
        lambda: DateTimeSensorAsync(task_id="t", target_time="2030-01-01T06:00:00"),
        lambda: DateTimeSensor(task_id="t", target_time="2030-01-01T06:00:00", deferrable=True),
    ],
    ids=["async", "deferrable"],
)
def test_async_datetime_sensor_defers(runner: Any, clock: Clock, make: Any) -> None:
    with DAG("d") as d:
        make()
    r = runner(d)
    with pytest.raises(TaskDeferred) as info:
        r.run("t")
    trigger = info.value.trigger
    assert isinstance(trigger, DateTimeTrigger)
    assert trigger.moment == datetime(2030, 1, 1, 6, tzinfo=UTC)
    assert trigger.end_from_trigger is False
    assert info.value.method_name == "execute_complete"
    resumed = execute_task(
        d.get_task("t"),
        r.context("t"),
        next_method="execute_complete",
        next_kwargs={"event": trigger.moment.isoformat()},
    )
    assert resumed is None
    assert r.store == {}


def test_async_datetime_sensor_can_end_in_the_trigger(runner: Any) -> None:
    with DAG("d") as d:
        DateTimeSensorAsync(task_id="t", target_time=START, end_from_trigger=True)
    with pytest.raises(TaskDeferred) as info:
        runner(d).run("t")
    assert info.value.trigger.serialize()[1]["end_from_trigger"] is True


def test_time_delta_sensor_waits_after_the_data_interval_end(runner: Any, clock: Clock) -> None:
    with DAG("d") as d:
        TimeDeltaSensor(task_id="t", delta=timedelta(hours=1))
        TimeDeltaSensorAsync(task_id="a", delta=3600)
        TimeDeltaSensor(task_id="deferrable", delta=timedelta(hours=1), deferrable=True)
    end = START - timedelta(minutes=30)
    r = runner(d, logical_date=end)
    context = r.context("t")
    assert d.get_task("t").target(context) == end + timedelta(hours=1)  # type: ignore[attr-defined]
    assert r.run("t") is None
    assert sum(clock.sleeps) == 30 * 60
    for task_id in ("a", "deferrable"):
        with pytest.raises(TaskDeferred) as info:
            r.run(task_id)
        assert isinstance(info.value.trigger, DateTimeTrigger)
        assert info.value.trigger.moment == end + timedelta(hours=1)


def test_time_delta_sensor_without_dates_counts_from_the_run_start(
    runner: Any, clock: Clock
) -> None:
    with DAG("d") as d:
        TimeDeltaSensor(task_id="t", delta=timedelta(minutes=5))
    r = runner(d, logical_date=None)
    context = r.context("t")
    sensor = d.get_task("t")
    assert sensor.target(context) == clock.now + timedelta(minutes=5)  # type: ignore[attr-defined]
    r.dag_run = type(r.dag_run)(dag_id="d", run_id="run1", start_date=START - timedelta(1))
    assert sensor.target(r.context("t")) == START - timedelta(1) + timedelta(minutes=5)  # type: ignore[attr-defined]


# --- file sensors ------------------------------------------------------------------------


def test_file_sensor_returns_the_matched_path(
    runner: Any, clock: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "in" / "2024-03-05.csv"
    target.parent.mkdir()
    with DAG("d") as d:
        FileSensor(task_id="f", filepath=str(tmp_path / "in" / "{{ ds }}.csv"), poke_interval=10)

    def create_then_sleep(seconds: float) -> None:
        target.write_text("x")  # the file appears while the sensor waits
        Clock.sleep(clock, seconds)

    monkeypatch.setattr(clock, "sleep", create_then_sleep)
    r = runner(d)
    assert r.run("f") == str(target)
    assert r.xcom("f") == str(target)
    assert clock.sleeps == [10.0]


@pytest.mark.parametrize("cls", [FileSensorAsync, FileSensor])
def test_async_file_sensor_defers_to_a_file_trigger(runner: Any, cls: type[FileSensor]) -> None:
    extra = {} if cls is FileSensorAsync else {"deferrable": True}
    with DAG("d") as d:
        cls(
            task_id="f",
            filepath="/data/{{ ds }}/*.csv",
            recursive=True,
            poke_interval=15,
            timeout=timedelta(hours=2),
            **extra,
        )
    r = runner(d)
    with pytest.raises(TaskDeferred) as info:
        r.run("f")
    trigger = info.value.trigger
    assert isinstance(trigger, FileTrigger)
    assert trigger.serialize()[1] == {
        "filepath": "/data/2024-03-05/*.csv",
        "recursive": True,
        "poll_interval": 15.0,
    }
    assert info.value.method_name == "execute_complete"
    assert info.value.timeout == timedelta(hours=2)
    resumed = execute_task(
        d.get_task("f"),
        r.context("f"),
        next_method="execute_complete",
        next_kwargs={"event": {"path": "/data/2024-03-05/a.csv"}},
    )
    assert resumed == "/data/2024-03-05/a.csv"
    assert r.xcom("f") == "/data/2024-03-05/a.csv"
