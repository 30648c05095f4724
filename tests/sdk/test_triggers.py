"""Triggers: events, the built-in triggers running under asyncio, loading, argument checks."""

from __future__ import annotations

import asyncio
import logging
import time
import types
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec
import pytest

import tailrace.clock
from tailrace.sdk import (
    BaseTrigger,
    DateTimeTrigger,
    FileTrigger,
    TaskFailedEvent,
    TaskSuccessEvent,
    TimeDeltaTrigger,
    TriggerEvent,
)
from tailrace.sdk.errors import TriggerArgumentError, TriggerLoadError
from tailrace.sdk.triggers import _temporal, check_trigger_kwargs, load_trigger, task_end_of


async def collect(trigger: BaseTrigger) -> list[Any]:
    return [event async for event in trigger.run()]


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=10))


# --- events ------------------------------------------------------------------------------


def test_trigger_event_is_value_like() -> None:
    event = TriggerEvent({"page": 1}, checkpoint={"cursor": "abc"})
    assert event == TriggerEvent({"page": 1}, checkpoint={"cursor": "abc"})
    assert event != TriggerEvent({"page": 1})
    assert event != TriggerEvent({"page": 2}, checkpoint={"cursor": "abc"})
    assert (event.trigger_run_id, event.sequence_index, event.is_last) == (None, None, False)
    assert repr(event) == "TriggerEvent({'page': 1}, checkpoint={'cursor': 'abc'})"
    filled = TriggerEvent(1)
    filled.trigger_run_id, filled.sequence_index, filled.is_last = "r1", 3, True
    assert filled != TriggerEvent(1)
    assert repr(filled) == "TriggerEvent(1, sequence_index=3, is_last=True)"
    assert TriggerEvent() == TriggerEvent(None)


def test_task_end_events_and_task_end_of() -> None:
    success = TaskSuccessEvent({"return_value": 42})
    failed = TaskFailedEvent("upstream API said no")
    assert success.payload == {"__task_end__": "success", "xcoms": {"return_value": 42}}
    assert failed.payload == {"__task_end__": "failed", "error": "upstream API said no"}
    assert success.xcoms == {"return_value": 42}
    assert failed.error == "upstream API said no"
    assert TaskSuccessEvent().payload == {"__task_end__": "success", "xcoms": {}}
    assert isinstance(success, TriggerEvent)
    assert success != TriggerEvent(success.payload)  # the type is part of the value

    stored = msgspec.json.decode(msgspec.json.encode(success.payload))
    assert task_end_of(stored) == ("success", {"xcoms": {"return_value": 42}})
    stored = msgspec.json.decode(msgspec.json.encode(failed.payload))
    assert task_end_of(stored) == ("failed", {"error": "upstream API said no"})
    assert task_end_of(success) == ("success", {"xcoms": {"return_value": 42}})
    for other in (None, "x", 3, [], {"path": "/tmp"}, {"__task_end__": "maybe"}):
        assert task_end_of(other) is None


# --- BaseTrigger -------------------------------------------------------------------------


class Pages(BaseTrigger):
    """Streams pages, yielding bare payloads and events."""

    def __init__(self, pages: int) -> None:
        super().__init__()
        self.pages = pages
        self.cleaned = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{__name__}.Pages", {"pages": self.pages}

    async def run(self) -> AsyncIterator[Any]:
        for page in range(self.pages - 1):
            yield {"page": page}
        yield TriggerEvent({"page": self.pages - 1}, checkpoint=self.pages)

    async def cleanup(self) -> None:
        self.cleaned = True


def test_a_trigger_may_stream_many_events() -> None:
    trigger = Pages(3)
    assert run(collect(trigger)) == [
        {"page": 0},
        {"page": 1},
        TriggerEvent({"page": 2}, checkpoint=3),
    ]
    run(trigger.cleanup())
    assert trigger.cleaned


def test_base_trigger_is_abstract_and_has_a_logger() -> None:
    with pytest.raises(TypeError, match="abstract"):
        BaseTrigger()  # type: ignore[abstract]
    trigger = Pages(1)
    assert trigger.log.name == "tailrace.triggers.Pages"
    assert repr(trigger) == f"<{__name__}.Pages(pages=1)>"


def test_default_cleanup_is_a_no_op() -> None:
    run(DateTimeTrigger(datetime(2000, 1, 1)).cleanup())


# --- DateTimeTrigger / TimeDeltaTrigger ----------------------------------------------------


def test_datetime_trigger_fires_at_its_moment(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tailrace.triggers")
    moment = datetime.now(UTC) + timedelta(milliseconds=50)
    events = run(collect(DateTimeTrigger(moment)))
    assert datetime.now(UTC) >= moment
    assert events == [TriggerEvent(moment.isoformat())]
    assert f"sleeping until {moment.isoformat()}" in caplog.text


def test_datetime_trigger_in_the_past_fires_at_once() -> None:
    assert run(collect(DateTimeTrigger("2001-02-03T04:05:06"))) == [
        TriggerEvent("2001-02-03T04:05:06+00:00")
    ]


def test_datetime_trigger_can_end_the_task() -> None:
    moment = datetime.now(UTC) + timedelta(milliseconds=20)
    assert run(collect(DateTimeTrigger(moment, end_from_trigger=True))) == [TaskSuccessEvent()]


def test_datetime_trigger_moments_are_utc() -> None:
    naive = DateTimeTrigger(datetime(2030, 1, 1, 12))
    assert naive.moment == datetime(2030, 1, 1, 12, tzinfo=UTC)
    plus_two = timezone(timedelta(hours=2))
    shifted = DateTimeTrigger(datetime(2030, 1, 1, 14, tzinfo=plus_two))
    assert shifted.moment == naive.moment
    assert shifted.moment.tzinfo is UTC
    with pytest.raises(TypeError, match="moment must be a datetime"):
        DateTimeTrigger(12)  # type: ignore[arg-type]


class FakeClock:
    """A wall clock that moves only when the trigger sleeps (plus injected jumps)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self.jumps: list[timedelta] = []

    def utcnow(self) -> datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += timedelta(seconds=seconds) + (self.jumps.pop(0) if self.jumps else timedelta())


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    fake = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    # asyncio's sleep is not the clock's: the fake's advances the clock instead of waiting.
    monkeypatch.setattr(_temporal, "asyncio", types.SimpleNamespace(sleep=fake.sleep))
    with tailrace.clock.installed(fake.utcnow, time.sleep):
        yield fake


def test_datetime_trigger_sleeps_in_chunks_of_at_most_an_hour(clock: FakeClock) -> None:
    moment = clock.now + timedelta(hours=2, minutes=30)
    assert run(collect(DateTimeTrigger(moment))) == [TriggerEvent(moment.isoformat())]
    assert clock.sleeps == [3600.0, 3600.0, 1800.0]
    assert clock.now == moment


def test_datetime_trigger_notices_a_wall_clock_jump(clock: FakeClock) -> None:
    """The host was suspended for 3 hours during the first chunk: fire after it, not later."""
    moment = clock.now + timedelta(hours=5)
    clock.jumps = [timedelta(hours=3)]
    run(collect(DateTimeTrigger(moment)))
    assert clock.sleeps == [3600.0, 3600.0]


def test_time_delta_trigger_is_a_datetime_trigger_for_now_plus_delta() -> None:
    before = datetime.now(UTC)
    trigger = TimeDeltaTrigger(timedelta(milliseconds=50))
    assert before + timedelta(milliseconds=50) <= trigger.moment
    assert trigger.moment <= datetime.now(UTC) + timedelta(milliseconds=50)
    classpath, kwargs = trigger.serialize()
    assert classpath == "tailrace.sdk.triggers.DateTimeTrigger"
    assert kwargs == {"moment": trigger.moment.isoformat(), "end_from_trigger": False}
    assert run(collect(trigger)) == [TriggerEvent(trigger.moment.isoformat())]
    assert datetime.now(UTC) >= trigger.moment
    assert TimeDeltaTrigger(0.5).delta == timedelta(seconds=0.5)


# --- FileTrigger -------------------------------------------------------------------------


class OnLog(logging.Handler):
    """Calls ``action`` for every record whose message contains ``text``."""

    def __init__(self, text: str, action: Callable[[], None]) -> None:
        super().__init__(logging.INFO)
        self.text = text
        self.action = action

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.action()


def test_file_trigger_fires_once_the_file_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tailrace.triggers.FileTrigger")
    target = tmp_path / "incoming" / "data.csv"
    target.parent.mkdir()
    trigger = FileTrigger(str(tmp_path / "incoming" / "*.csv"), poll_interval=0.01)

    async def scenario() -> list[Any]:
        first_poll = asyncio.Event()
        handler = OnLog("no file matching", first_poll.set)
        logger = logging.getLogger("tailrace.triggers.FileTrigger")
        logger.addHandler(handler)
        try:
            events = asyncio.create_task(collect(trigger))
            await first_poll.wait()
            target.write_text("a,b\n")
            return await events
        finally:
            logger.removeHandler(handler)

    assert run(scenario()) == [TriggerEvent({"path": str(target)})]
    assert "no file matching" in caplog.text


def test_file_trigger_recursive_glob_and_directories(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (nested / "z.json").write_text("{}")
    (nested / "y.json").write_text("{}")
    pattern = str(tmp_path / "**" / "*.json")
    assert run(collect(FileTrigger(pattern, recursive=True))) == [
        TriggerEvent({"path": str(nested / "y.json")})
    ]
    # A matching directory counts once it holds a file.
    assert run(collect(FileTrigger(str(tmp_path / "a")))) == [
        TriggerEvent({"path": str(tmp_path / "a")})
    ]


def test_file_trigger_accepts_airflows_poke_interval() -> None:
    assert FileTrigger("/x", poke_interval=2).poll_interval == 2.0


# --- serialize / load_trigger ------------------------------------------------------------


@pytest.mark.parametrize(
    "trigger",
    [
        DateTimeTrigger(datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)),
        DateTimeTrigger(datetime(2030, 5, 6), end_from_trigger=True),
        TimeDeltaTrigger(timedelta(hours=1)),
        FileTrigger("/data/*.csv", recursive=True, poll_interval=2.5),
        Pages(4),
    ],
    ids=["datetime", "datetime-ending-the-task", "timedelta", "file", "custom"],
)
def test_serialize_and_load_trigger_round_trip(trigger: BaseTrigger) -> None:
    classpath, kwargs = trigger.serialize()
    check_trigger_kwargs(kwargs, dag_id="d", task_id="t")
    for stored in (kwargs, msgspec.json.decode(msgspec.json.encode(kwargs))):
        loaded = load_trigger(classpath, stored)
        assert isinstance(loaded, BaseTrigger)
        assert loaded.serialize() == (classpath, kwargs)


class NotATrigger:
    pass


@pytest.mark.parametrize(
    ("classpath", "kwargs", "match"),
    [
        ("NoDots", {}, "not a dotted path"),
        ("tailrace_no_such_module.Trigger", {}, "importing module 'tailrace_no_such_module'"),
        ("tailrace.sdk.triggers.NoSuchTrigger", {}, "has no 'NoSuchTrigger'"),
        (f"{__name__}.NotATrigger", {}, "not a BaseTrigger subclass"),
        ("tailrace.sdk.triggers.FileTrigger", {"path": "/x"}, r"raised TypeError"),
    ],
)
def test_load_trigger_errors_name_the_classpath(
    classpath: str, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(TriggerLoadError, match=match) as info:
        load_trigger(classpath, kwargs)
    assert info.value.classpath == classpath
    assert f"Cannot load trigger '{classpath}'" in str(info.value)


# --- check_trigger_kwargs ----------------------------------------------------------------


def _error(kwargs: dict[str, Any], **options: Any) -> TriggerArgumentError:
    with pytest.raises(TriggerArgumentError) as info:
        check_trigger_kwargs(kwargs, dag_id="etl", task_id="wait", **options)
    return info.value


def test_json_values_pass() -> None:
    check_trigger_kwargs(
        {
            "s": "x",
            "n": 1.5,
            "b": True,
            "none": None,
            "nested": {"list": [1, {"k": "v"}], "tuple": (1, 2)},
            "when": datetime(2030, 1, 1, tzinfo=UTC),
            "tags": {"a", "b"},
        },
        dag_id="etl",
        task_id="wait",
    )


def test_a_lambda_is_named_with_dag_task_and_argument() -> None:
    error = _error({"check": lambda: True})
    message = str(error)
    assert message.startswith("Trigger argument kwargs['check'] is a lambda (type 'function')")
    # The path kwargs['check'] names the field: said once.
    assert "[DAG 'etl', task 'wait']" in message
    assert "Pass plain JSON values" in message
    assert "build clients inside run()" in message
    assert (error.dag_id, error.task_id, error.field) == ("etl", "wait", "check")
    assert error.path == "kwargs['check']"


def test_an_open_file_is_rejected(tmp_path: Path) -> None:
    with (tmp_path / "f.txt").open("w") as handle:
        error = _error({"out": handle})
    assert "a value of type '_io.TextIOWrapper'" in str(error)


def test_a_closure_is_rejected() -> None:
    prefix = "p"

    def make_name(x: str) -> str:
        return prefix + x

    error = _error({"namer": make_name}, what="start trigger")
    assert str(error).startswith("Start trigger argument kwargs['namer'] is a closure")
    assert "make_name" in str(error)


def test_the_path_to_a_nested_bad_value_is_named() -> None:
    client = object()
    error = _error({"ok": 1, "cfg": {"url": "https://x", "client": client}})
    assert error.path == "kwargs['cfg']['client']"
    assert error.field == "cfg"
    assert "kwargs['cfg']['client'] is a value of type 'object'" in str(error)
    assert _error({"items": [1, 2, [3, client]]}).path == "kwargs['items'][2][1]"
    assert _error({"m": {object(): 1}}, name="next_kwargs").path.startswith(
        "next_kwargs['m'] (key <object object"
    )


def test_a_self_referencing_value_does_not_recurse_forever() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert _error({"loop": loop}).field == "loop"
