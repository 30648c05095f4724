"""The DAG: a set of tasks, their dependencies, and when to run them."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta, tzinfo
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, overload

from tailrace.sdk._callbacks import (
    Callback,
    Callbacks,
    as_callbacks,
    refuse_ignored_dag_args,
    refuse_unknown_args,
)
from tailrace.sdk._contextstack import pop_dag, push_dag
from tailrace.sdk._dag_test import DagTestRun
from tailrace.sdk._deadline import DeadlineAlert, check_deadlines
from tailrace.sdk._params import DagParam, Param, ParamsDict
from tailrace.sdk._schedule import ParsedSchedule, ScheduleArg, parse_schedule
from tailrace.sdk._setup_teardown import check_setup_teardown
from tailrace.sdk._taskgroup import TaskGroup
from tailrace.sdk._trigger_rule import TriggerRule
from tailrace.sdk._types import NOTSET, ArgNotSet, as_timedelta, as_utc, validate_id
from tailrace.sdk.errors import DagCycleError, DagDefinitionError, DuplicateTaskIdError
from tailrace.sdk.timezone import timezone_name
from tailrace.sdk.triggers._base import resolve_start_trigger

if TYPE_CHECKING:
    import jinja2

    from tailrace.sdk._node import AbstractOperator

_P = ParamSpec("_P")

_SDK_DIR = os.path.dirname(os.path.abspath(__file__))
_registered: list[DAG] = []


def pop_registered_dags() -> list[DAG]:
    """Return the DAGs created since the last call (in creation order) and forget them.

    The DAG file parser calls this after importing a file.
    """
    dags = list(_registered)
    _registered.clear()
    return dags


def _caller_file() -> str:
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        internal = os.path.abspath(filename).startswith(_SDK_DIR)
        if not internal and not filename.startswith("<frozen"):
            return filename
        frame = frame.f_back  # type: ignore[assignment]
    return ""


class DAG:
    """A workflow: tasks, their dependencies, and the schedule of its runs.

    Use it as a context manager (tasks created inside belong to it) or via :func:`dag`::

        with DAG("etl", schedule="@daily", start_date=datetime(2024, 1, 1)) as dag:
            extract >> transform >> load

    ``schedule`` is ``None`` (manual runs only), a cron expression, a preset (``@once``,
    ``@hourly``, ``@daily``, ``@weekly``, ``@monthly``, ``@quarterly``, ``@yearly``,
    ``@annually``), a ``timedelta``, or assets: an :class:`Asset`, a list of them (all
    must be updated) or a condition (``a & (b | c)``) — the DAG then runs when a task's
    success or an external event has updated what it waits for. Naive datetimes are taken
    as UTC; the time zone of an aware ``start_date``
    (``pendulum.datetime(2026, 3, 1, tz="Europe/Amsterdam")``) is the DAG's
    :attr:`timezone`, the wall clock its cron schedule is read on. ``default_args`` supply
    arguments to every task that does not pass them itself. ``params`` are run
    inputs (values or :class:`Param`), overridable from a run's conf.
    """

    def __init__(
        self,
        dag_id: str,
        description: str | None = None,
        *,
        schedule: ScheduleArg = None,
        start_date: datetime | None = None,
        end_date: datetime | None = None,
        catchup: bool = False,
        max_active_runs: int = 16,
        max_active_tasks: int = 16,
        dagrun_timeout: timedelta | None = None,
        default_args: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Collection[str] | None = None,
        doc_md: str | None = None,
        is_paused_upon_creation: bool | None = None,
        template_searchpath: str | Iterable[str] | None = None,
        user_defined_macros: Mapping[str, Any] | None = None,
        user_defined_filters: Mapping[str, Callable[..., Any]] | None = None,
        template_undefined: type[jinja2.Undefined] | None = None,
        render_template_as_native_obj: bool = False,
        jinja_environment_kwargs: Mapping[str, Any] | None = None,
        on_success_callback: Callbacks = None,
        on_failure_callback: Callbacks = None,
        sla_miss_callback: Any = None,
        deadline: DeadlineAlert | list[DeadlineAlert] | None = None,
        owner_links: Mapping[str, str] | None = None,
        dag_display_name: str | None = None,
        fileloc: str | None = None,
        stream_retention: timedelta | None = None,
        **kwargs: Any,
    ) -> None:
        self.dag_id = validate_id(dag_id, kind="DAG")
        refuse_unknown_args(["DAG"], kwargs, kind="DAG", dag_id=self.dag_id, task_id=None)
        refuse_ignored_dag_args({"sla_miss_callback": sla_miss_callback}, dag_id=self.dag_id)
        self.description = description
        self.default_args: dict[str, Any] = dict(default_args or {})
        if start_date is None and "start_date" in self.default_args:
            start_date = self.default_args["start_date"]
        self.start_date = as_utc(start_date)
        self.end_date = as_utc(end_date)
        # Cron schedules are read on this zone's wall clock, as in Airflow.
        self.timezone: tzinfo = self.start_date.tzinfo if self.start_date else UTC  # type: ignore[assignment]
        self.schedule = schedule
        self.parsed_schedule: ParsedSchedule = parse_schedule(schedule, dag_id=self.dag_id)
        self.catchup = catchup
        self.max_active_runs = max_active_runs
        self.max_active_tasks = max_active_tasks
        self.dagrun_timeout = as_timedelta(dagrun_timeout)
        # A Tailrace extension: how long a finished run's output streams are kept for
        # replay (None: the stream_retention_seconds setting).
        self.stream_retention = _retention(stream_retention, self.dag_id)
        self.params = ParamsDict(params)
        self.tags: list[str] = sorted(set(tags or ()))
        self.doc_md = doc_md
        self.is_paused_upon_creation = is_paused_upon_creation
        if isinstance(template_searchpath, str):
            template_searchpath = [template_searchpath]
        self.template_searchpath: list[str] = list(template_searchpath or [])
        self.user_defined_macros: dict[str, Any] = dict(user_defined_macros or {})
        self.user_defined_filters: dict[str, Callable[..., Any]] = dict(user_defined_filters or {})
        self.template_undefined = template_undefined
        self.render_template_as_native_obj = render_template_as_native_obj
        self.jinja_environment_kwargs: dict[str, Any] = dict(jinja_environment_kwargs or {})
        # Each a list of callables, called with the run's context when the run finishes,
        # in a worker (never in the scheduler).
        where = {"dag_id": self.dag_id, "task_id": None}
        self.on_success_callback: list[Callback] = as_callbacks(
            on_success_callback, name="on_success_callback", **where
        )
        self.on_failure_callback: list[Callback] = as_callbacks(
            on_failure_callback, name="on_failure_callback", **where
        )
        # Deadline alerts: the scheduler watches them, a worker or the triggerer calls back.
        self.deadline: list[DeadlineAlert] = check_deadlines(deadline, dag_id=self.dag_id)
        self.owner_links: dict[str, str] = dict(owner_links or {})
        self.dag_display_name = dag_display_name or self.dag_id
        self.fileloc = fileloc if fileloc is not None else _caller_file()
        self.task_dict: dict[str, AbstractOperator] = {}
        # Edge labels (Label): upstream task id -> downstream task id -> {"label": ...}.
        self.edge_info: dict[str, dict[str, dict[str, str]]] = {}
        # (upstream, downstream) task ids -> (file, line) where the dependency was set.
        self.edge_locations: dict[tuple[str, str], tuple[str, int]] = {}
        self.task_group_dict: dict[str, TaskGroup] = {}
        self.task_group = TaskGroup(None, dag=self)
        self._jinja_env: jinja2.Environment | None = None
        _registered.append(self)

    def __repr__(self) -> str:
        return f"<DAG: {self.dag_id}>"

    @property
    def timezone_name(self) -> str:
        """The IANA name (or ``+HH:MM`` offset) of :attr:`timezone`."""
        return timezone_name(self.timezone)

    def __enter__(self) -> DAG:
        push_dag(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pop_dag()

    # -- tasks --------------------------------------------------------------------------

    def add_task(self, task: AbstractOperator) -> None:
        """Add ``task``; raises :class:`DuplicateTaskIdError` if its id is taken."""
        existing = self.task_dict.get(task.task_id)
        if existing is task:
            return
        if existing is not None or task.task_id in self.task_group_dict:
            raise DuplicateTaskIdError(dag_id=self.dag_id, task_id=task.task_id)
        if task.dag is not None and task.dag is not self:
            raise DagDefinitionError(
                f"Task '{task.task_id}' already belongs to DAG '{task.dag.dag_id}'",
                dag_id=self.dag_id,
                task_id=task.task_id,
            )
        task.dag = self
        if task.task_group is None or task.task_group.dag is not self:
            task.task_group = self.task_group
        task.task_group.add(task)
        own_params = getattr(task, "params", None)
        task.params = self.params.merged(own_params)  # type: ignore[attr-defined]
        self.task_dict[task.task_id] = task

    def add_tasks(self, tasks: Iterable[AbstractOperator]) -> None:
        for task in tasks:
            self.add_task(task)

    @property
    def tasks(self) -> list[AbstractOperator]:
        """All tasks, in the order they were added."""
        return list(self.task_dict.values())

    @property
    def task_ids(self) -> list[str]:
        return list(self.task_dict)

    def has_task(self, task_id: str) -> bool:
        return task_id in self.task_dict

    def get_task(self, task_id: str) -> AbstractOperator:
        """The task called ``task_id``; ``KeyError`` naming the DAG if there is none."""
        try:
            return self.task_dict[task_id]
        except KeyError:
            raise KeyError(f"Task '{task_id}' not found in DAG '{self.dag_id}'") from None

    @property
    def roots(self) -> list[AbstractOperator]:
        """Tasks without upstream tasks."""
        return [t for t in self.task_dict.values() if not t.upstream_task_ids]

    @property
    def leaves(self) -> list[AbstractOperator]:
        """Tasks without downstream tasks."""
        return [t for t in self.task_dict.values() if not t.downstream_task_ids]

    def topological_sort(self) -> list[AbstractOperator]:
        """Tasks ordered so that each comes after all its upstream tasks.

        Ties keep the order tasks were added. Raises :class:`DagCycleError` on a cycle.
        """
        indegree = {tid: len(t.upstream_task_ids) for tid, t in self.task_dict.items()}
        ready = [tid for tid, n in indegree.items() if n == 0]
        order: list[AbstractOperator] = []
        position = {tid: i for i, tid in enumerate(self.task_dict)}
        while ready:
            ready.sort(key=position.__getitem__, reverse=True)
            tid = ready.pop()
            task = self.task_dict[tid]
            order.append(task)
            for down in task.downstream_task_ids:
                indegree[down] -= 1
                if indegree[down] == 0:
                    ready.append(down)
        if len(order) != len(self.task_dict):
            cycle = self._find_cycle()
            location = self.edge_locations.get((cycle[-2], cycle[-1])) if cycle else None
            raise DagCycleError(dag_id=self.dag_id, cycle=cycle, location=location)
        return order

    def _find_cycle(self) -> list[str]:
        state: dict[str, int] = {}  # 1: on the current path, 2: done
        for start in self.task_dict:
            if state.get(start):
                continue
            path: list[str] = [start]
            stack: list[Iterator[str]] = [iter(sorted(self.task_dict[start].downstream_task_ids))]
            state[start] = 1
            while stack:
                nxt = next(stack[-1], None)
                if nxt is None:
                    state[path.pop()] = 2
                    stack.pop()
                elif state.get(nxt) == 1:
                    return [*path[path.index(nxt) :], nxt]
                elif not state.get(nxt):
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append(iter(sorted(self.task_dict[nxt].downstream_task_ids)))
        return []

    # -- validation ---------------------------------------------------------------------

    def validate(self) -> None:
        """Check the whole DAG; raise the first :class:`DagDefinitionError` found.

        Checks the schedule, the dates (``end_date >= start_date``, a scheduled DAG needs
        a ``start_date``), param defaults against their schemas, trigger rules, the
        ``start_trigger_args`` of ``start_from_trigger`` tasks (JSON-safe arguments), and
        cycles.
        """
        self.parsed_schedule = parse_schedule(self.schedule, dag_id=self.dag_id)
        # An asset schedule runs on events, not on a calendar: it needs no start_date.
        if self.parsed_schedule.kind not in ("none", "asset") and self.start_date is None:
            raise DagDefinitionError(
                f"DAG '{self.dag_id}' has schedule {self.schedule!r} but no start_date",
                dag_id=self.dag_id,
                field="start_date",
                hint="Pass start_date=, or schedule=None for a DAG that only runs manually.",
            )
        if self.start_date and self.end_date and self.end_date < self.start_date:
            raise DagDefinitionError(
                f"DAG '{self.dag_id}' ends ({self.end_date.isoformat()}) before it starts "
                f"({self.start_date.isoformat()})",
                dag_id=self.dag_id,
                field="end_date",
                hint="Make end_date later than start_date.",
            )
        try:
            self.timezone_name  # noqa: B018 - it raises for a zone it cannot store
        except ValueError as exc:
            raise DagDefinitionError(
                f"DAG '{self.dag_id}': {exc}", dag_id=self.dag_id, field="start_date"
            ) from None
        self.params.validate_defaults(dag_id=self.dag_id)
        for task in self.task_dict.values():
            TriggerRule.parse(task.trigger_rule, task_id=task.task_id, dag_id=self.dag_id)
            check_setup_teardown(task, dag_id=self.dag_id)
            task_params = getattr(task, "params", None)
            if isinstance(task_params, ParamsDict):
                task_params.validate_defaults(dag_id=self.dag_id)
            if resolve_start_trigger(task, dag_id=self.dag_id) is None:
                _check_has_execute(task, dag_id=self.dag_id)
            missing = (task.upstream_task_ids | task.downstream_task_ids) - self.task_dict.keys()
            if missing:
                raise DagDefinitionError(
                    f"Task '{task.task_id}' depends on tasks not in DAG '{self.dag_id}': "
                    f"{sorted(missing)}",
                    dag_id=self.dag_id,
                    task_id=task.task_id,
                )
        self.topological_sort()

    def test(
        self,
        run_after: datetime | None = None,
        logical_date: datetime | None = None,
        run_conf: Mapping[str, Any] | None = None,
        conn_file_path: str | None = None,
        variable_file_path: str | None = None,
        use_executor: bool = False,
        mark_success_pattern: Any = None,
    ) -> DagTestRun:
        """Run this DAG once, in this process, as Airflow's ``dag.test()``: each task's
        code runs in the calling thread, one task at a time (its log is printed to
        stderr when it ends); a deferred task's trigger runs in a thread beside it, and
        the task resumes when it fires; streams and ``.iterate()`` flow as in a
        deployment. The run lives in a throwaway SQLite database. Returns the run's state,
        its task states and return values::

            if __name__ == "__main__":
                print(my_dag.test().state)

        ``variable_file_path`` / ``conn_file_path`` name JSON files of ``key: value`` /
        ``conn_id: URI`` to load first (``TAILRACE_VAR_*`` and ``TAILRACE_CONN_*`` work
        too). ``run_after`` is taken as the logical date when that is not given.
        """
        from tailrace.sdk._dag_test import run_dag_test
        from tailrace.sdk.errors import UnsupportedArgumentError

        if use_executor:
            raise UnsupportedArgumentError(
                dag_id=self.dag_id,
                task_id=None,
                field="use_executor",
                value=use_executor,
                hint="dag.test() runs tasks in this process; to run them on the configured "
                "executor, use `tailrace dags test DAG_ID`.",
            )
        if mark_success_pattern is not None:
            raise UnsupportedArgumentError(
                dag_id=self.dag_id,
                task_id=None,
                field="mark_success_pattern",
                value=mark_success_pattern,
                hint="Remove it: dag.test() runs every task.",
            )
        return run_dag_test(
            self,
            logical_date=logical_date or run_after,
            run_conf=run_conf,
            conn_file_path=conn_file_path,
            variable_file_path=variable_file_path,
        )

    def resolve_params(self, conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The final param values of a run with ``conf``; raises :class:`ParamValidationError`."""
        return self.params.resolve(conf, dag_id=self.dag_id)

    # -- templating ---------------------------------------------------------------------

    @property
    def folder(self) -> str:
        """The folder of the DAG file (templates are looked up here first)."""
        return os.path.dirname(os.path.abspath(self.fileloc)) if self.fileloc else os.getcwd()

    def get_template_env(self) -> jinja2.Environment:
        """The Jinja environment templates of this DAG are rendered with."""
        if self._jinja_env is None:
            from tailrace.sdk._templating import create_environment

            self._jinja_env = create_environment(
                searchpath=[self.folder, *self.template_searchpath],
                undefined=self.template_undefined,
                native=self.render_template_as_native_obj,
                macros=self.user_defined_macros,
                filters=self.user_defined_filters,
                extra=self.jinja_environment_kwargs,
            )
        return self._jinja_env


def _check_has_execute(task: AbstractOperator, *, dag_id: str) -> None:
    """An operator must define ``execute`` unless it starts from its trigger."""
    cls = getattr(task, "operator_class", type(task))
    if isinstance(cls, type) and _lacks_execute(cls):
        raise DagDefinitionError(
            f"Task '{task.task_id}' ({cls.__name__}) defines no execute() method",
            dag_id=dag_id,
            task_id=task.task_id,
            hint="Define execute(self, context), or set start_from_trigger = True with "
            "start_trigger_args to start the task in the triggerer.",
        )


@functools.cache
def _lacks_execute(cls: type) -> bool:
    from tailrace.sdk._baseoperator import BaseOperator

    return issubclass(cls, BaseOperator) and cls.execute is BaseOperator.execute


def _params_from_signature(
    the_dag: DAG, f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Turn the decorated function's parameters into DAG params and DagParam references."""
    sig = inspect.signature(f)
    bound = sig.bind_partial(*args, **kwargs)
    call_kwargs: dict[str, Any] = {}
    for name, p in sig.parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            if name in bound.arguments:
                raise TypeError(f"@dag function {f.__name__}() cannot take *args or **kwargs")
            continue
        if name in bound.arguments:
            value = bound.arguments[name]
        elif p.default is not p.empty:
            value = p.default
        else:
            value = NOTSET
        if name in the_dag.params and isinstance(value, ArgNotSet):
            pass
        elif isinstance(value, Param) or name not in the_dag.params:
            the_dag.params[name] = value if isinstance(value, Param) else Param(value)
        else:
            the_dag.params[name] = value
        call_kwargs[name] = DagParam(name, the_dag.params.get_param(name).value)
    return (), call_kwargs


@overload
def dag(dag_id: Callable[_P, Any]) -> Callable[_P, DAG]: ...
@overload
def dag(
    dag_id: str | None = None, **kwargs: Any
) -> Callable[[Callable[_P, Any]], Callable[_P, DAG]]: ...


def dag(dag_id: Any = None, **kwargs: Any) -> Any:
    """Decorate a function that creates tasks; calling it builds and returns the :class:`DAG`.

    Takes the :class:`DAG` arguments; ``dag_id`` defaults to the function name::

        @dag(schedule=None)
        def my_pipeline():
            load(extract())

        my_pipeline()
    """

    def decorator(f: Callable[_P, Any]) -> Callable[_P, DAG]:
        @functools.wraps(f)
        def factory(*args: _P.args, **fkwargs: _P.kwargs) -> DAG:
            the_id = dag_id if isinstance(dag_id, str) else f.__name__
            dag_kwargs = dict(kwargs)
            if "fileloc" not in dag_kwargs:
                dag_kwargs["fileloc"] = inspect.getsourcefile(f) or _caller_file()
            if "description" not in dag_kwargs and f.__doc__:
                dag_kwargs["description"] = inspect.cleandoc(f.__doc__).splitlines()[0]
            if "doc_md" not in dag_kwargs and f.__doc__:
                dag_kwargs["doc_md"] = inspect.cleandoc(f.__doc__)
            with DAG(the_id, **dag_kwargs) as the_dag:
                call_args, call_kwargs = _params_from_signature(the_dag, f, args, fkwargs)
                f(*call_args, **call_kwargs)
            return the_dag

        return factory

    if callable(dag_id):
        return decorator(dag_id)
    return decorator


def _retention(value: timedelta | float | None, dag_id: str) -> timedelta | None:
    """``stream_retention``: a positive timedelta (or seconds), or None for the setting."""
    try:
        retention = as_timedelta(value)
    except TypeError as exc:
        raise DagDefinitionError(
            f"stream_retention: {exc}",
            dag_id=dag_id,
            field="stream_retention",
            hint="Pass stream_retention=timedelta(days=…), or leave it out to use the "
            "stream_retention_seconds setting.",
        ) from None
    if retention is not None and retention.total_seconds() < 0:
        raise DagDefinitionError(
            f"stream_retention must not be negative, got {retention}",
            dag_id=dag_id,
            field="stream_retention",
            hint="timedelta(0) deletes a finished run's streams at once; leave it out to "
            "use the stream_retention_seconds setting.",
        )
    return retention
