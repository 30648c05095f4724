"""Deadline alerts (Airflow 3.1): ``DAG(deadline=DeadlineAlert(...))`` calls a callback
when a run has not finished by a moment computed from a reference and an interval.

The classes keep Airflow's names and arguments; what they say is checked when the DAG is
built (:func:`check_deadlines`), so an error names the DAG and the argument. The
scheduler computes and watches the deadlines; the callback runs in a worker
(:class:`SyncCallback`) or the triggerer (:class:`AsyncCallback`), never the scheduler.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, NoReturn

from tailrace.sdk._types import as_utc
from tailrace.sdk.errors import DagDefinitionError, UnsupportedNameError

__all__ = [
    "AsyncCallback",
    "DeadlineAlert",
    "DeadlineReference",
    "SyncCallback",
    "check_deadlines",
]

CUSTOM_REFERENCES = (
    "Custom deadline references are not in Tailrace: use DeadlineReference.DAGRUN_QUEUED_AT, "
    "DAGRUN_LOGICAL_DATE, FIXED_DATETIME(datetime) or AVERAGE_RUNTIME(max_runs, min_runs)."
)
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


# -- references ----------------------------------------------------------------------


class _Reference:
    """Where a deadline is counted from; ``reference_name`` is Airflow's class name."""

    @property
    def reference_name(self) -> str:
        return type(self).__name__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Reference):
            return NotImplemented
        return vars(self) == vars(other) and type(self) is type(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, *sorted(map(repr, vars(self).items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{self.reference_name}({args})"


class DagRunQueuedAtDeadline(_Reference):
    """When the run was queued (again, once cleared)."""


class DagRunLogicalDateDeadline(_Reference):
    """The run's logical date."""


class FixedDatetimeDeadline(_Reference):
    """A fixed moment."""

    def __init__(self, dt: Any) -> None:
        self._datetime = dt


class AverageRuntimeDeadline(_Reference):
    """Now (the run's creation) plus the average runtime of the DAG's latest runs."""

    DEFAULT_LIMIT = 10

    def __init__(self, max_runs: Any, min_runs: Any = None) -> None:
        self.max_runs = max_runs
        self.min_runs = max_runs if min_runs is None else min_runs


class DeadlineReference:
    """The references a :class:`DeadlineAlert` counts from, as in Airflow 3.1::

        DeadlineReference.DAGRUN_QUEUED_AT       # when the run was queued
        DeadlineReference.DAGRUN_LOGICAL_DATE    # the run's logical date
        DeadlineReference.FIXED_DATETIME(datetime(2026, 6, 1, 9))
        DeadlineReference.AVERAGE_RUNTIME(max_runs=10, min_runs=5)

    ``AVERAGE_RUNTIME`` averages the durations of the DAG's latest ``max_runs`` finished
    runs; with fewer than ``min_runs`` of them the run gets no deadline.
    """

    class TYPES:
        """When a reference's deadline is computed: as the run is created, or each time
        it is queued (a cleared run is queued again)."""

        DAGRUN_CREATED: tuple[type[_Reference], ...] = (
            DagRunLogicalDateDeadline,
            FixedDatetimeDeadline,
            AverageRuntimeDeadline,
        )
        DAGRUN_QUEUED: tuple[type[_Reference], ...] = (DagRunQueuedAtDeadline,)
        DAGRUN: tuple[type[_Reference], ...] = DAGRUN_CREATED + DAGRUN_QUEUED

    DAGRUN_QUEUED_AT: _Reference = DagRunQueuedAtDeadline()
    DAGRUN_LOGICAL_DATE: _Reference = DagRunLogicalDateDeadline()

    @classmethod
    def FIXED_DATETIME(cls, dt: datetime) -> _Reference:
        return FixedDatetimeDeadline(dt)

    @classmethod
    def AVERAGE_RUNTIME(cls, max_runs: int = 0, min_runs: int | None = None) -> _Reference:
        return AverageRuntimeDeadline(max_runs or AverageRuntimeDeadline.DEFAULT_LIMIT, min_runs)

    @classmethod
    def register_custom_reference(cls, reference_class: Any, *args: Any) -> NoReturn:
        raise UnsupportedNameError(
            name="DeadlineReference.register_custom_reference", hint=CUSTOM_REFERENCES
        )


# -- callbacks -----------------------------------------------------------------------


class _Callback:
    """A callable (or its dotted import path) and the keyword arguments it is called with
    when a deadline is missed. It also gets ``context`` when it takes that argument (or
    ``**kwargs``): ``{"dag_run": {...the run as the REST API shows it...},
    "deadline": {"id", "deadline_time", "name"}}``. String values of ``kwargs`` are Jinja
    templates rendered with that context (``"{{ dag_run.dag_id }}"``)."""

    kind = ""

    def __init__(
        self, callback_callable: Callable[..., Any] | str, kwargs: dict[str, Any] | None = None
    ) -> None:
        self.callback_callable = callback_callable
        self.kwargs = kwargs if kwargs is not None else {}
        self.path = _path_of(callback_callable)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return (self.path, self.kwargs) == (other.path, other.kwargs)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.path))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, kwargs={self.kwargs!r})"


class AsyncCallback(_Callback):
    """An ``async def`` callback, awaited in the triggerer (it holds no worker)."""

    kind = "async"


class SyncCallback(_Callback):
    """A plain callback, called in a worker process."""

    kind = "sync"

    def __init__(
        self,
        callback_callable: Callable[..., Any] | str,
        kwargs: dict[str, Any] | None = None,
        executor: str | None = None,
    ) -> None:
        super().__init__(callback_callable, kwargs)
        self.executor = executor


def _path_of(callback: Any) -> str:
    if isinstance(callback, str):
        return callback.strip()
    module = getattr(callback, "__module__", None)
    qualname = getattr(callback, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(callback)


# -- alerts --------------------------------------------------------------------------


class DeadlineAlert:
    """Call ``callback`` when a run has not finished by ``reference`` + ``interval``::

        DAG(
            "nightly",
            deadline=DeadlineAlert(
                reference=DeadlineReference.DAGRUN_QUEUED_AT,
                interval=timedelta(minutes=30),
                callback=SyncCallback(page, kwargs={"text": "{{ dag_run.run_id }} is late"}),
            ),
        )

    A run that finishes before its deadline cancels it. ``interval`` may be negative only
    for ``FIXED_DATETIME`` (alert before that moment). A DAG may have a list of alerts.
    """

    def __init__(
        self,
        reference: Any,
        interval: timedelta,
        callback: AsyncCallback | SyncCallback,
        name: str | None = None,
    ) -> None:
        self.reference = reference
        self.interval = interval
        self.callback = callback
        self.name = name

    def __repr__(self) -> str:
        return (
            f"DeadlineAlert(reference={self.reference!r}, interval={self.interval!r}, "
            f"callback={self.callback!r}, name={self.name!r})"
        )


# -- checked when the DAG is built -----------------------------------------------------


def check_deadlines(value: Any, *, dag_id: str) -> list[DeadlineAlert]:
    """``deadline=`` as a list of alerts, each checked; a DagDefinitionError names the DAG,
    the argument and what to do."""
    if value is None:
        return []
    alerts = list(value) if isinstance(value, list | tuple) else [value]
    for number, alert in enumerate(alerts, 1):
        where = "deadline" if len(alerts) == 1 else f"deadline[{number - 1}]"
        _check_alert(alert, dag_id, where)
    return alerts


def _refuse(message: str, dag_id: str, where: str, hint: str | None = None) -> DagDefinitionError:
    return DagDefinitionError(message, dag_id=dag_id, field=where, hint=hint)


def _check_alert(alert: Any, dag_id: str, where: str) -> None:
    if not isinstance(alert, DeadlineAlert):
        raise _refuse(
            f"deadline must be a DeadlineAlert or a list of them, got {alert!r}",
            dag_id,
            where,
            "Pass DeadlineAlert(reference=..., interval=timedelta(...), callback=...).",
        )
    _check_reference(alert.reference, dag_id, where)
    interval = alert.interval
    if not isinstance(interval, timedelta):
        raise _refuse(
            f"the interval must be a timedelta, got {interval!r}",
            dag_id,
            where,
            "Pass interval=timedelta(minutes=30) (a Variable-backed interval is not in "
            "Tailrace: read the Variable into a timedelta in the DAG file).",
        )
    if interval < timedelta(0) and not isinstance(alert.reference, FixedDatetimeDeadline):
        raise _refuse(
            f"the interval -{-interval} is negative: the deadline would pass before the run "
            f"is {'queued' if isinstance(alert.reference, DagRunQueuedAtDeadline) else 'due'}",
            dag_id,
            where,
            "Pass a positive interval; only FIXED_DATETIME takes a negative one (an alert "
            "before that moment).",
        )
    if alert.name is not None and not isinstance(alert.name, str):
        raise _refuse(
            f"the alert's name must be a string, got {alert.name!r}",
            dag_id,
            where,
            "Pass name='...' or leave it out.",
        )
    _check_callback(alert.callback, dag_id, where)


def _check_reference(reference: Any, dag_id: str, where: str) -> None:
    if isinstance(reference, FixedDatetimeDeadline):
        if not isinstance(reference._datetime, datetime):
            raise _refuse(
                f"FIXED_DATETIME takes a datetime, got {reference._datetime!r}",
                dag_id,
                where,
                "Pass a datetime (naive ones are UTC) or a pendulum DateTime.",
            )
        reference._datetime = as_utc(reference._datetime)
    elif isinstance(reference, AverageRuntimeDeadline):
        for name in ("max_runs", "min_runs"):
            count = getattr(reference, name)
            if count.__class__ is not int or count < 1:
                raise _refuse(
                    f"AVERAGE_RUNTIME's {name} must be a whole number of at least 1, got {count!r}",
                    dag_id,
                    where,
                    "Pass AVERAGE_RUNTIME(max_runs=10, min_runs=5): how many finished runs "
                    "to average at most, and at least.",
                )
    elif not isinstance(reference, DagRunQueuedAtDeadline | DagRunLogicalDateDeadline):
        raise _refuse(
            f"the reference {reference!r} is not a deadline reference Tailrace knows",
            dag_id,
            where,
            CUSTOM_REFERENCES,
        )


def _check_callback(callback: Any, dag_id: str, where: str) -> None:
    if not isinstance(callback, AsyncCallback | SyncCallback):
        raise _refuse(
            f"callbacks of type {type(callback).__name__} are not supported",
            dag_id,
            where,
            "Wrap the callable: callback=SyncCallback(fn) (a worker calls it) or "
            "AsyncCallback(async_fn) (the triggerer awaits it).",
        )
    if isinstance(callback, SyncCallback) and callback.executor is not None:
        raise _refuse(
            f"SyncCallback(executor={callback.executor!r}) is not supported",
            dag_id,
            where,
            "Remove executor=: a deployment has one executor (the executor setting).",
        )
    if not isinstance(callback.kwargs, Mapping):
        raise _refuse(
            f"the callback's kwargs must be a dict, got {callback.kwargs!r}",
            dag_id,
            where,
            "Pass kwargs={'name': value, ...}.",
        )
    if "context" in callback.kwargs:
        raise _refuse(
            "context is a reserved kwarg of a deadline callback",
            dag_id,
            where,
            "Rename it: the callback gets the deadline's context as its context argument.",
        )
    target = _resolve(callback, dag_id, where)
    if callback.kind == "async" and not _awaitable(target):
        raise _refuse(
            f"AsyncCallback({callback.path!r}) is not awaitable",
            dag_id,
            where,
            "Make it an async def, or use SyncCallback for a plain function.",
        )
    if callback.kind == "sync" and inspect.iscoroutinefunction(target):
        raise _refuse(
            f"SyncCallback({callback.path!r}) is an async function",
            dag_id,
            where,
            "Use AsyncCallback for it: the triggerer awaits it.",
        )


def _resolve(callback: _Callback, dag_id: str, where: str) -> Any:
    """The callable, found the way the worker and the triggerer will find it: by path."""
    given = callback.callback_callable
    if not isinstance(given, str):
        qualname = getattr(given, "__qualname__", None) or "<locals>"  # a partial, say
        if (
            not callable(given)
            or inspect.ismethod(given)
            or "<lambda>" in qualname
            or "<locals>" in qualname
        ):
            raise _refuse(
                f"the deadline callback {given!r} cannot be imported by path",
                dag_id,
                where,
                "Pass a function defined at the top level of a module (the DAG file, or a "
                "module beside it or in the plugins folder): not a lambda, a nested function, "
                "a bound method or a functools.partial.",
            )
        return given
    if not _DOTTED.match(callback.path):
        raise _refuse(
            f"{given!r} is not a dotted import path",
            dag_id,
            where,
            "Pass the callable itself, or its path as 'package.module.function'.",
        )
    try:
        target = import_path(callback.path)
    except (ImportError, AttributeError) as exc:
        raise _refuse(
            f"the deadline callback {callback.path!r} cannot be imported ({exc})",
            dag_id,
            where,
            "Put it in a module on the DAGs or plugins folder (workers and the triggerer "
            "import it from there), or pass the callable itself.",
        ) from None
    if not callable(target):
        raise _refuse(
            f"{callback.path!r} is {target!r}, not a callable",
            dag_id,
            where,
            "Point the path at a function ('package.module.function').",
        )
    return target


def _awaitable(target: Any) -> bool:
    return inspect.iscoroutinefunction(target) or hasattr(target, "__await__")


def import_path(path: str) -> Any:
    """The object at ``module.name`` (or ``module.Class.method``), importing the longest
    importable module prefix."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:split])
        try:
            obj: Any = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not f"{module}.".startswith(f"{exc.name}."):
                raise  # the module exists; something it imports does not
            continue
        for name in parts[split:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"no module of {path!r} can be imported")
