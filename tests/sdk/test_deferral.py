"""Deferring tasks: ``BaseOperator.defer``, ``defer()`` in ``@task``, resuming, start triggers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from tailrace.sdk import (
    DAG,
    BaseOperator,
    DateTimeTrigger,
    StartTriggerArgs,
    TaskDeferred,
    TimeDeltaTrigger,
    defer,
    task,
)
from tailrace.sdk.errors import DagDefinitionError, TriggerArgumentError
from tailrace.sdk.execution import execute_task
from tailrace.sdk.triggers import RESUME_TASKFLOW
from tailrace.serialization import serialize_dag

MOMENT = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


class Waiter(BaseOperator):
    template_fields = ("note",)

    def __init__(self, *, label: str = "x", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.note = label

    def execute(self, context: Any) -> Any:
        self.defer(
            trigger=DateTimeTrigger(MOMENT),
            method_name="execute_complete",
            kwargs={"attempt": 1},
            timeout=30,
        )

    def execute_complete(self, context: Any, event: Any = None, attempt: int = 0) -> Any:
        return {"event": event, "attempt": attempt, "note": self.note}


def test_operator_defer_raises_task_deferred(runner: Any) -> None:
    with DAG("d") as d:
        Waiter(task_id="w")
    r = runner(d)
    with pytest.raises(TaskDeferred) as info:
        r.run("w")
    deferred = info.value
    assert isinstance(deferred.trigger, DateTimeTrigger)
    assert deferred.trigger.moment == MOMENT
    assert deferred.method_name == "execute_complete"
    assert deferred.kwargs == {"attempt": 1}
    assert deferred.timeout == timedelta(seconds=30)
    assert r.store == {}


def test_task_deferred_is_not_caught_by_except_exception(runner: Any) -> None:
    class Swallower(BaseOperator):
        def execute(self, context: Any) -> Any:
            try:
                self.defer(trigger=TimeDeltaTrigger(timedelta(1)), method_name="execute")
            except Exception:  # user code that catches "everything"
                return "swallowed"

    with DAG("d") as d:
        Swallower(task_id="s")
    with pytest.raises(TaskDeferred):
        runner(d).run("s")


def test_task_deferred_pickles() -> None:
    import pickle

    signal = TaskDeferred(
        trigger=DateTimeTrigger(MOMENT),
        method_name="execute_complete",
        kwargs={"a": 1},
        timeout=timedelta(seconds=5),
    )
    copy = pickle.loads(pickle.dumps(signal))
    assert isinstance(copy, TaskDeferred)
    assert copy.trigger.serialize() == signal.trigger.serialize()
    assert (copy.method_name, copy.kwargs, copy.timeout) == (
        "execute_complete",
        {"a": 1},
        timedelta(seconds=5),
    )
    assert "resumes in execute_complete()" in str(copy)


def test_resume_calls_next_method_with_event_and_pushes_its_result(runner: Any) -> None:
    with DAG("d") as d:
        Waiter(task_id="w", label="{{ run_id }}")
    r = runner(d)
    result = execute_task(
        d.get_task("w"),
        r.context("w"),
        next_method="execute_complete",
        next_kwargs={"event": "fired", "attempt": 1},
    )
    assert result == {"event": "fired", "attempt": 1, "note": "run1"}
    assert r.xcom("w") == result


def test_resume_may_defer_again(runner: Any) -> None:
    with DAG("d") as d:
        Waiter(task_id="w")
    r = runner(d)
    with pytest.raises(TaskDeferred) as info:
        execute_task(d.get_task("w"), r.context("w"), next_method="execute", next_kwargs={})
    assert info.value.method_name == "execute_complete"


def test_resume_into_a_missing_method_names_it(runner: Any) -> None:
    with DAG("d") as d:
        Waiter(task_id="w")
    r = runner(d)
    with pytest.raises(TypeError, match="'w' cannot resume in 'nope'"):
        execute_task(d.get_task("w"), r.context("w"), next_method="nope", next_kwargs={})


def test_defer_checks_method_and_trigger(runner: Any) -> None:
    class Bad(BaseOperator):
        def execute(self, context: Any) -> Any:
            self.defer(trigger=DateTimeTrigger(MOMENT), method_name="missing")

    class NotATrigger(BaseOperator):
        def execute(self, context: Any) -> Any:
            self.defer(trigger="soon", method_name="execute")  # type: ignore[arg-type]

    with DAG("d") as d:
        Bad(task_id="bad")
        NotATrigger(task_id="nat")
    r = runner(d)
    with pytest.raises(TypeError, match="no such method"):
        r.run("bad")
    with pytest.raises(TypeError, match="not a BaseTrigger"):
        r.run("nat")


def test_defer_rejects_resume_kwargs_that_are_not_json(runner: Any) -> None:
    class Leaky(BaseOperator):
        def execute(self, context: Any) -> Any:
            self.defer(
                trigger=DateTimeTrigger(MOMENT),
                method_name="execute",
                kwargs={"callback": lambda: None},
            )

    with DAG("d") as d:
        Leaky(task_id="leaky")
    with pytest.raises(TriggerArgumentError) as info:
        runner(d).run("leaky")
    assert info.value.path == "kwargs['callback']"
    assert "DAG 'd'" in str(info.value)
    assert "task 'leaky'" in str(info.value)


# --- TaskFlow ----------------------------------------------------------------------------


def test_defer_in_taskflow_raises_task_deferred_with_resume_marker(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def wait(n: int, token: str = "", event: Any = None) -> Any:
            if event is None:
                defer(DateTimeTrigger(MOMENT), kwargs={"token": "abc"}, timeout=timedelta(1))
            return {"n": n, "event": event}

        wait(3)
    with pytest.raises(TaskDeferred) as info:
        runner(d).run("wait")
    assert info.value.method_name == RESUME_TASKFLOW
    assert info.value.kwargs == {"token": "abc"}
    assert info.value.timeout == timedelta(days=1)


def test_taskflow_resume_calls_the_function_again_with_event(runner: Any) -> None:
    calls: list[dict[str, Any]] = []
    with DAG("d") as d:

        @task
        def produce() -> int:
            return 7

        @task
        def wait(n: int, token: str = "", event: Any = None) -> Any:
            calls.append({"n": n, "token": token, "event": event})
            if event is None:
                defer(DateTimeTrigger(MOMENT), kwargs={"token": "abc"})
            return n * 2

        wait(produce())
    r = runner(d)
    r.run("produce")
    with pytest.raises(TaskDeferred) as info:
        r.run("wait")
    resumed = execute_task(
        d.get_task("wait"),
        r.context("wait"),
        next_method=info.value.method_name,
        next_kwargs={**info.value.kwargs, "event": "2030-01-02T03:04:05+00:00"},
    )
    assert resumed == 14
    assert r.xcom("wait") == 14
    assert calls == [
        {"n": 7, "token": "", "event": None},
        {"n": 7, "token": "abc", "event": "2030-01-02T03:04:05+00:00"},
    ]


def test_taskflow_resume_of_a_mapped_task(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def wait(x: int, event: Any = None) -> Any:
            if event is None:
                defer(DateTimeTrigger(MOMENT))
            return [x, event]

        wait.expand(x=[10, 20])
    r = runner(d)
    result = execute_task(
        d.get_task("wait"),
        r.context("wait", map_index=1),
        next_method=RESUME_TASKFLOW,
        next_kwargs={"event": "e"},
    )
    assert result == [20, "e"]
    assert r.xcom("wait", map_index=1) == [20, "e"]


def test_defer_in_a_function_without_event_is_a_clear_type_error(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def no_event() -> None:
            defer(DateTimeTrigger(MOMENT))

        @task
        def no_token(event: Any = None) -> None:
            defer(DateTimeTrigger(MOMENT), kwargs={"token": 1})

        @task
        def takes_anything(**kwargs: Any) -> None:
            defer(DateTimeTrigger(MOMENT), kwargs={"token": 1})

        no_event()
        no_token()
        takes_anything()
    r = runner(d)
    with pytest.raises(TypeError, match=r"'.*no_event'.*\['event'\].*event=None"):
        r.run("no_event")
    with pytest.raises(TypeError, match=r"\['token'\]"):
        r.run("no_token")
    with pytest.raises(TaskDeferred):
        r.run("takes_anything")


def test_defer_outside_a_task_or_in_an_operator() -> None:
    with pytest.raises(RuntimeError, match="outside a running task"):
        defer(DateTimeTrigger(MOMENT))


# --- start_from_trigger ------------------------------------------------------------------


class StartsInTriggerer(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls="tailrace.sdk.triggers.DateTimeTrigger",
        trigger_kwargs={"moment": MOMENT, "end_from_trigger": False},
        next_method="execute_complete",
        next_kwargs={"note": "hi"},
        timeout=timedelta(minutes=5),
    )

    def execute(self, context: Any) -> Any:
        raise AssertionError("never runs in a worker")

    def execute_complete(self, context: Any, event: Any = None, note: str = "") -> Any:
        return [event, note]


def test_start_trigger_args_are_serialized() -> None:
    with DAG("d") as d:
        StartsInTriggerer(task_id="s")
        Waiter(task_id="plain")
    serialized = serialize_dag(d)
    start = serialized.task("s").start_trigger
    assert start is not None
    assert start.classpath == "tailrace.sdk.triggers.DateTimeTrigger"
    assert start.kwargs == {"moment": MOMENT, "end_from_trigger": False}
    assert start.next_method == "execute_complete"
    assert start.next_kwargs == {"note": "hi"}
    assert start.timeout == 300.0
    assert serialized.task("plain").start_trigger is None


def test_start_trigger_args_set_on_the_instance() -> None:
    class Configurable(BaseOperator):
        def __init__(self, *, seconds: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.start_from_trigger = True
            self.start_trigger_args = StartTriggerArgs(
                trigger_cls="tailrace.sdk.triggers.FileTrigger",
                trigger_kwargs={"filepath": "/tmp/x", "poll_interval": seconds},
            )

        def execute(self, context: Any) -> Any:
            return None

    with DAG("d") as d:
        Configurable(task_id="c", seconds=3)
    start = serialize_dag(d).task("c").start_trigger
    assert start is not None
    assert start.kwargs == {"filepath": "/tmp/x", "poll_interval": 3}
    assert start.next_method is None
    assert start.timeout is None


def test_start_trigger_with_a_lambda_is_a_parse_time_error() -> None:
    class Leaky(StartsInTriggerer):
        start_trigger_args = StartTriggerArgs(
            trigger_cls="my.triggers.Poller",
            trigger_kwargs={"cfg": {"check": lambda: True}},
        )

    with DAG("leaky_dag") as d:
        Leaky(task_id="leaky_task")
    with pytest.raises(TriggerArgumentError) as info:
        d.validate()
    message = str(info.value)
    assert "leaky_dag" in message
    assert "leaky_task" in message
    assert "trigger_kwargs['cfg']['check']" in message
    assert "lambda" in message
    assert info.value.field == "cfg"
    with pytest.raises(TriggerArgumentError):
        serialize_dag(d)


def test_start_trigger_next_kwargs_are_checked_too() -> None:
    class Leaky(StartsInTriggerer):
        start_trigger_args = StartTriggerArgs(
            trigger_cls="my.triggers.Poller", next_kwargs={"when": {1, 2}, "fh": object()}
        )

    with DAG("d") as d:
        Leaky(task_id="t")
    with pytest.raises(TriggerArgumentError, match=r"next_kwargs\['fh'\].*'object'"):
        serialize_dag(d)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (None, "start_from_trigger=True but no start_trigger_args"),
        ({"trigger_cls": "x"}, "not a StartTriggerArgs"),
        (StartTriggerArgs(trigger_cls="NoModule"), "not a dotted path"),
        (StartTriggerArgs(trigger_cls="a.B", next_method="nope"), "not a method"),
    ],
)
def test_unusable_start_trigger_args(args: Any, match: str) -> None:
    class Broken(BaseOperator):
        start_from_trigger = True
        start_trigger_args: ClassVar[Any] = args

        def execute(self, context: Any) -> Any:
            return None

    with DAG("d") as d:
        Broken(task_id="broken")
    with pytest.raises(DagDefinitionError, match=match) as info:
        serialize_dag(d)
    assert info.value.task_id == "broken"
    assert info.value.dag_id == "d"


def test_a_mapped_task_takes_the_start_trigger_of_its_class() -> None:
    with DAG("d") as d:
        StartsInTriggerer.partial(task_id="m").expand(retries=[1, 2])
    start = serialize_dag(d).task("m").start_trigger
    assert start is not None
    assert start.classpath == "tailrace.sdk.triggers.DateTimeTrigger"


def test_start_trigger_args_without_start_from_trigger_are_ignored() -> None:
    class Optional(StartsInTriggerer):
        start_from_trigger = False

    with DAG("d") as d:
        Optional(task_id="o")
    assert serialize_dag(d).task("o").start_trigger is None
