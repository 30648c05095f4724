"""Triggers: the async waits a deferred task hands to the triggerer, and their events."""

from __future__ import annotations

import importlib
import logging
import types
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal

import msgspec

from tailrace.sdk.errors import DagDefinitionError, TriggerArgumentError, TriggerLoadError
from tailrace.sdk.timezone import json_default

RESUME_TASKFLOW: Final = "__resume_taskflow__"
# The resume "method" of an operator that consumes a stream of events in batches:
# ``handle_trigger_events(self, events, context)``; what it yields is its output stream.
HANDLE_TRIGGER_EVENTS: Final = "handle_trigger_events"
"""The ``method_name`` of a deferral made with :func:`~tailrace.sdk.defer` in a ``@task``:
resuming calls the task's function again (with ``event=``)."""

TASK_END_KEY: Final = "__task_end__"


class TriggerEvent:
    """One event a trigger yields: a JSON-safe ``payload`` and an optional ``checkpoint``.

    The ``checkpoint`` (JSON-safe too) is stored with the event; a trigger that restarts
    (say, on another triggerer after a crash) can continue from the last one. A
    ``dedup_key`` (a message id) makes a redelivered message recognisable: see
    :meth:`BaseTrigger.acknowledge`.
    ``trigger_run_id``, ``sequence_index`` and ``is_last`` are the envelope: the runtime
    fills them in when it persists the event, a trigger leaves them alone. A trigger may
    also yield a bare payload, which the runtime wraps in a ``TriggerEvent``.
    """

    __slots__ = (
        "checkpoint",
        "dedup_key",
        "is_last",
        "payload",
        "sequence_index",
        "trigger_run_id",
    )

    def __init__(
        self, payload: Any = None, *, checkpoint: Any = None, dedup_key: str | None = None
    ) -> None:
        self.payload = payload
        self.checkpoint = checkpoint
        # The source's own id of what the event carries (a broker's message id): an event
        # yielded again with a key already stored for the trigger is dropped, and the
        # trigger's ``acknowledge`` is called with the key once the event is handled.
        self.dedup_key = dedup_key
        self.trigger_run_id: str | None = None
        self.sequence_index: int | None = None
        self.is_last: bool = False

    def _fields(self) -> tuple[Any, ...]:
        return (
            type(self),
            self.payload,
            self.checkpoint,
            self.trigger_run_id,
            self.sequence_index,
            self.is_last,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TriggerEvent):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # the payload may be mutable

    def __repr__(self) -> str:
        extra = f", checkpoint={self.checkpoint!r}" if self.checkpoint is not None else ""
        if self.sequence_index is not None:
            extra += f", sequence_index={self.sequence_index}"
        if self.is_last:
            extra += ", is_last=True"
        return f"{type(self).__name__}({self.payload!r}{extra})"


class TaskSuccessEvent(TriggerEvent):
    """An event that ends the deferred task as *success* at once, without a worker.

    ``xcoms`` (JSON-safe) are pushed as the task's XComs. Yield it from a trigger whose
    task has nothing left to do once the wait is over (``end_from_trigger``).
    """

    __slots__ = ()

    def __init__(self, xcoms: dict[str, Any] | None = None) -> None:
        super().__init__({TASK_END_KEY: "success", "xcoms": dict(xcoms or {})})

    @property
    def xcoms(self) -> dict[str, Any]:
        """The XComs the task ends with."""
        xcoms: dict[str, Any] = self.payload["xcoms"]
        return xcoms


class TaskFailedEvent(TriggerEvent):
    """An event that ends the deferred task as *failed* at once, without a worker."""

    __slots__ = ()

    def __init__(self, error: str) -> None:
        super().__init__({TASK_END_KEY: "failed", "error": str(error)})

    @property
    def error(self) -> str:
        """Why the task failed."""
        error: str = self.payload["error"]
        return error


def task_end_of(
    payload: Any,
) -> tuple[Literal["success", "failed"], dict[str, Any]] | None:
    """Whether an event payload ends its task: ``("success", {"xcoms": {...}})`` for a
    :class:`TaskSuccessEvent`'s payload, ``("failed", {"error": "..."})`` for a
    :class:`TaskFailedEvent`'s, ``None`` for any other payload.

    Works on the payload after a JSON round trip (it is a plain dict), and on an event.
    """
    if isinstance(payload, TriggerEvent):
        payload = payload.payload
    if not isinstance(payload, Mapping):
        return None
    kind = payload.get(TASK_END_KEY)
    if kind == "success":
        xcoms = payload.get("xcoms")
        return "success", {"xcoms": dict(xcoms) if isinstance(xcoms, Mapping) else {}}
    if kind == "failed":
        return "failed", {"error": str(payload.get("error", ""))}
    return None


class BaseTrigger(ABC):
    """Base class of triggers: small async programs that wait in the triggerer.

    A trigger must be re-creatable in another process: :meth:`serialize` returns its
    classpath and the keyword arguments that rebuild it. Those arguments are stored as
    JSON, so they must be plain values, and :meth:`__init__` must accept them in their
    JSON form (datetimes come back as ISO-8601 strings, tuples and sets as lists).
    Create clients and connections inside :meth:`run`, never in ``__init__``.

    :meth:`run` is an async generator: it yields :class:`TriggerEvent` objects (or bare
    payloads), one or many. A run that yields many (a stream) may attach a ``checkpoint``
    to an event — what it needs to continue after it — and must then continue from
    ``self.checkpoint`` when it is set: after a triggerer dies, another resumes the run
    from the last durable checkpoint, and events it yields again are recognised by their
    sequence number and dropped (so a run must be deterministic from a checkpoint).
    It must never block the event loop: use ``await`` for I/O and ``asyncio.to_thread``
    for blocking calls. Example::

        class CounterTrigger(BaseTrigger):
            def __init__(self, n: int) -> None:
                super().__init__()
                self.n = n

            def serialize(self) -> tuple[str, dict[str, Any]]:
                return "my_dags.triggers.CounterTrigger", {"n": self.n}

            async def run(self) -> AsyncIterator[TriggerEvent]:
                for i in range(self.n):
                    await asyncio.sleep(1)
                    yield TriggerEvent(i)
    """

    def __init__(self, **kwargs: Any) -> None:
        # Accepts and ignores extra keywords, as Airflow's BaseTrigger does.
        self.trigger_id: int | str | None = None
        # Set by the runtime before run() when the trigger resumes elsewhere (a triggerer
        # died): the ``checkpoint`` of the last durable event that had one, else None.
        # A streaming trigger starts from it (say, the next page URL); without one it
        # starts over, and the events it regenerates are dropped by sequence number.
        self.checkpoint: Any = None

    @abstractmethod
    def serialize(self) -> tuple[str, dict[str, Any]]:
        """``(classpath, kwargs)``: the importable ``"module.ClassName"`` and the JSON-safe
        keyword arguments that re-create this trigger."""

    @abstractmethod
    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait, and yield one or more events. Runs in the triggerer's event loop."""
        raise NotImplementedError
        yield  # pragma: no cover - makes this an async generator

    async def acknowledge(self, dedup_keys: list[str]) -> None:  # noqa: B027 - optional
        """Called with the ``dedup_key`` s of events whose outcome is durable: the asset
        events a watcher's event became are committed, or the task consuming the stream
        committed what it made of them. A trigger reading a message queue acknowledges
        those messages to its broker here — never earlier — so a crash before this point
        redelivers them, and the redelivery, recognised by its key, is dropped."""

    async def dead_letter(self, letters: list[tuple[str, Any, str]]) -> bool:
        """Tailrace: events (``dedup_key``, payload, reason) whose batch failed every try of
        a task with ``stream_retry="dead_letter"``, called just before their keys are
        acknowledged. A trigger reading a broker with dead letters copies them there;
        False (the default) says it has none: they are kept in Tailrace's table only."""
        return False

    def stop_gracefully(self) -> bool:
        """Tailrace: the DAG of the task this trigger serves was paused. A trigger that can
        end its stream early does so — a queue trigger stops pulling, and ``run`` returns
        once what it pulled is yielded — and returns True: the stream's end then reaches
        its consumer, which finishes what it was given, and the run ends. By default a
        trigger runs on, as a deferred task does in Airflow when its DAG is paused."""
        return False

    async def cleanup(self) -> None:  # noqa: B027 - an optional hook
        """Called when the trigger stops (finished, cancelled or moved); release resources."""

    @property
    def log(self) -> logging.Logger:
        """The logger ``tailrace.triggers.<ClassName>``."""
        return logging.getLogger(f"tailrace.triggers.{type(self).__name__}")

    def __repr__(self) -> str:
        try:
            classpath, kwargs = self.serialize()
        except Exception:  # a broken serialize() must not break repr()
            return f"<{type(self).__name__}>"
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        return f"<{classpath}({args})>"


class BaseEventTrigger(BaseTrigger):
    """A trigger that may watch for events from outside (Airflow 3's name): only these
    can be an :class:`~tailrace.sdk.AssetWatcher`'s trigger. Each event it yields becomes
    an asset event; it should run until cancelled, and give each event a ``dedup_key``
    when its source redelivers (a message queue)."""


def load_trigger(classpath: str, kwargs: dict[str, Any]) -> BaseTrigger:
    """Import the trigger class ``classpath`` (``"module.ClassName"``) and create it with
    ``kwargs``; raises :class:`~tailrace.sdk.errors.TriggerLoadError` naming the classpath."""
    module_name, _, class_name = classpath.rpartition(".")
    if not module_name or not class_name:
        raise TriggerLoadError(
            classpath=classpath,
            reason="it is not a dotted path 'module.ClassName'",
            hint="Return the full import path of the class from serialize().",
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise TriggerLoadError(
            classpath=classpath,
            reason=f"importing module '{module_name}' failed ({type(exc).__name__}: {exc})",
        ) from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        raise TriggerLoadError(
            classpath=classpath, reason=f"module '{module_name}' has no '{class_name}'"
        )
    if not (isinstance(cls, type) and issubclass(cls, BaseTrigger)):
        raise TriggerLoadError(
            classpath=classpath,
            reason=f"it is {cls!r}, not a BaseTrigger subclass",
            hint="Point the classpath at a class deriving from tailrace.BaseTrigger.",
        )
    try:
        return cls(**kwargs)
    except Exception as exc:
        raise TriggerLoadError(
            classpath=classpath,
            reason=f"{class_name}(**kwargs) with keys {sorted(kwargs)} raised "
            f"{type(exc).__name__}: {exc}",
        ) from exc


# --- JSON-safety of trigger arguments ------------------------------------------------------


def _encodes(value: Any) -> bool:
    try:
        msgspec.json.encode(value, enc_hook=json_default)
    except Exception:
        return False
    return True


def _describe(value: Any) -> str:
    kind = type(value)
    type_name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    if isinstance(value, types.FunctionType):
        if value.__name__ == "<lambda>":
            return f"a lambda (type '{type_name}')"
        if value.__closure__:
            return f"a closure '{value.__qualname__}' (type '{type_name}')"
        return f"a function '{value.__qualname__}' (type '{type_name}')"
    return f"a value of type '{type_name}'"


def _find_unencodable(value: Any, path: str, seen: set[int]) -> tuple[str, Any]:
    """The innermost value under ``value`` that msgspec cannot encode, and its path."""
    if id(value) in seen:
        return path, value
    seen.add(id(value))
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not _encodes({key: None}):
                return f"{path} (key {key!r})", key
            if not _encodes(item):
                return _find_unencodable(item, f"{path}[{key!r}]", seen)
    elif isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            if not _encodes(item):
                return _find_unencodable(item, f"{path}[{index}]", seen)
    return path, value


def check_trigger_kwargs(
    kwargs: Mapping[str, Any],
    *,
    dag_id: str | None,
    task_id: str | None,
    what: str = "trigger",
    name: str = "kwargs",
) -> None:
    """Raise :class:`~tailrace.sdk.errors.TriggerArgumentError` unless every value of
    ``kwargs`` can be stored as JSON (what ``msgspec.json.encode`` accepts).

    The error names the DAG, the task, the argument and the path to the offending value
    inside it (``kwargs['cfg']['client']``; ``name`` is the root of that path) and its type.
    ``what`` says whose arguments these are (``"trigger"``, ``"start trigger"`` ...).
    """
    for key, value in kwargs.items():
        if _encodes(value):
            continue
        path, bad = _find_unencodable(value, f"{name}[{key!r}]", set())
        raise TriggerArgumentError(
            dag_id=dag_id,
            task_id=task_id,
            field=str(key),
            path=path,
            value_type=_describe(bad),
            what=what,
        )


# --- start_from_trigger --------------------------------------------------------------------


@dataclass(frozen=True)
class StartTriggerArgs:
    """How a ``start_from_trigger`` task starts: in the triggerer, with no worker.

    Set it as the operator's ``start_trigger_args`` (class or instance attribute) together
    with ``start_from_trigger = True``. ``trigger_cls`` is the trigger's classpath and
    ``trigger_kwargs`` its JSON-safe arguments (checked when the DAG is parsed). When the
    trigger fires, a worker calls ``next_method(context, event=<payload>, **next_kwargs)``;
    with ``next_method=None`` the event ends the task (success, unless it is a
    :class:`TaskFailedEvent`). ``timeout`` bounds the wait.
    """

    trigger_cls: str
    trigger_kwargs: dict[str, Any] | None = None
    next_method: str | None = None
    next_kwargs: dict[str, Any] | None = None
    timeout: timedelta | None = None


def resolve_start_trigger(task: Any, *, dag_id: str | None) -> StartTriggerArgs | None:
    """The checked ``start_trigger_args`` of a task with ``start_from_trigger=True``
    (``None`` for other tasks); raises :class:`DagDefinitionError` when they are unusable.

    For a mapped task the operator class's attributes count.
    """
    source = getattr(task, "operator_class", task)
    if not getattr(source, "start_from_trigger", False):
        return None
    task_id: str = task.task_id
    args = getattr(source, "start_trigger_args", None)
    if args is None:
        raise DagDefinitionError(
            f"Task '{task_id}' has start_from_trigger=True but no start_trigger_args",
            dag_id=dag_id,
            task_id=task_id,
            field="start_trigger_args",
            hint="Set start_trigger_args = StartTriggerArgs(trigger_cls=..., trigger_kwargs=...) "
            "on the operator, or leave start_from_trigger False.",
        )
    if not isinstance(args, StartTriggerArgs):
        raise DagDefinitionError(
            f"start_trigger_args of task '{task_id}' is a {type(args).__name__}, "
            "not a StartTriggerArgs",
            dag_id=dag_id,
            task_id=task_id,
            field="start_trigger_args",
        )
    module, _, cls = args.trigger_cls.rpartition(".")
    if not module or not cls:
        raise DagDefinitionError(
            f"start_trigger_args.trigger_cls {args.trigger_cls!r} of task '{task_id}' is not "
            "a dotted path 'module.ClassName'",
            dag_id=dag_id,
            task_id=task_id,
            field="start_trigger_args",
            hint="Give the full import path of the trigger class.",
        )
    if args.next_method is not None and not callable(getattr(source, args.next_method, None)):
        raise DagDefinitionError(
            f"start_trigger_args.next_method {args.next_method!r} of task '{task_id}' is not "
            "a method of the operator",
            dag_id=dag_id,
            task_id=task_id,
            field="start_trigger_args",
            hint="Name a method such as 'execute_complete', or None to end the task with the "
            "trigger's event.",
        )
    what = "start trigger"
    check_trigger_kwargs(
        args.trigger_kwargs or {}, dag_id=dag_id, task_id=task_id, what=what, name="trigger_kwargs"
    )
    check_trigger_kwargs(
        args.next_kwargs or {}, dag_id=dag_id, task_id=task_id, what=what, name="next_kwargs"
    )
    return args
