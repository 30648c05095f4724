"""BaseOperator: the class every task derives from, and ``chain``."""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
from abc import ABCMeta
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

from tailrace.sdk._assets import check_inlets, check_outlets
from tailrace.sdk._callbacks import (
    Callbacks,
    as_callbacks,
    check_pool_slots,
    check_priority,
    refuse_ignored_task_args,
    refuse_unknown_args,
)
from tailrace.sdk._contextstack import current_dag, current_group
from tailrace.sdk._node import AbstractOperator, DependencyMixin, find_xcom_args
from tailrace.sdk._params import ParamsDict
from tailrace.sdk._trigger_rule import TriggerRule
from tailrace.sdk._types import as_timedelta, as_utc, validate_id
from tailrace.sdk.errors import DagDefinitionError, TaskDeferred
from tailrace.sdk.triggers._base import (
    RESUME_TASKFLOW,
    BaseTrigger,
    StartTriggerArgs,
    check_trigger_kwargs,
)

if TYPE_CHECKING:
    import jinja2

    from tailrace.sdk._context import Context
    from tailrace.sdk._dag import DAG
    from tailrace.sdk._mapped import OperatorPartial
    from tailrace.sdk._taskgroup import TaskGroup
    from tailrace.sdk._xcom_arg import XComArg

_F = TypeVar("_F", bound=Callable[..., None])

DEFAULT_OWNER = "tailrace"
DEFAULT_RETRY_DELAY = timedelta(seconds=300)
DEFAULT_MAX_BATCH_SIZE = 100
DEFAULT_MAX_BATCH_LATENCY = timedelta(milliseconds=50)
DEFAULT_MAX_PENDING_EVENTS = 1000
STREAM_RETRY_MODES = ("restart", "resume", "dead_letter")
DEFAULT_POOL = "default_pool"
DEFAULT_QUEUE = "default"


def merged_default_args(
    dag: DAG | None, group: TaskGroup | None, explicit: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The DAG's ``default_args``, then the task groups', then the task's own."""
    merged: dict[str, Any] = dict(dag.default_args) if dag is not None else {}
    if group is not None:
        merged.update(group.get_default_args())
    merged.update(explicit or {})
    return merged


def _apply_defaults(func: _F) -> _F:
    """Wrap an operator ``__init__`` so ``default_args`` fill the arguments it accepts."""
    sig = inspect.signature(func)
    names = [
        n
        for n, p in sig.parameters.items()
        if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    required = [n for n in names if sig.parameters[n].default is inspect.Parameter.empty]
    var_kw = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())

    @functools.wraps(func)
    def wrapper(self: BaseOperator, *args: Any, **kwargs: Any) -> None:
        if args:
            raise TypeError(
                f"Use keyword arguments when creating {type(self).__name__} "
                f"(task_id: {kwargs.get('task_id')!r})"
            )
        dag = kwargs.get("dag") or current_dag()
        group = kwargs.get("task_group") or current_group(dag)
        default_args = merged_default_args(dag, group, kwargs.get("default_args"))
        if default_args and ("default_args" in names or var_kw):
            kwargs["default_args"] = default_args
        for name in names:
            if name not in kwargs and name in default_args:
                kwargs[name] = default_args[name]
        missing = [n for n in required if n not in kwargs]
        if missing:
            raise DagDefinitionError(
                f"{type(self).__name__} is missing required argument(s) {missing}",
                dag_id=dag.dag_id if dag else None,
                task_id=kwargs.get("task_id"),
                field=missing[0],
                hint="Pass them to the operator or set them in default_args.",
            )
        depth: int = self.__dict__.get("_init_depth", 0)
        self._init_depth = depth + 1
        try:
            func(self, **kwargs)
        finally:
            self._init_depth = depth
        if depth == 0 and not self._from_mapped:
            self._set_xcomargs_dependencies()

    wrapper.__tailrace_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


class BaseOperatorMeta(ABCMeta):
    """Applies ``default_args`` to the ``__init__`` of every operator class."""

    def __new__(
        mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any
    ) -> BaseOperatorMeta:
        init = namespace.get("__init__")
        if init is not None and not getattr(init, "__tailrace_wrapped__", False):
            namespace["__init__"] = _apply_defaults(init)
        return super().__new__(mcls, name, bases, namespace, **kwargs)


class BaseOperator(AbstractOperator, metaclass=BaseOperatorMeta):
    """Base class of all operators; subclasses implement :meth:`execute`.

    Operator arguments must be passed by keyword. Arguments not passed are taken from
    the ``default_args`` of the DAG and enclosing task groups when the operator accepts
    them. The task joins the DAG given as ``dag=`` or the one open with ``with DAG(...)``.

    ``template_fields`` name attributes rendered with Jinja just before ``execute``
    (strings ending in one of ``template_ext`` are read as template files from the DAG
    folder or ``template_searchpath``); XComArgs in them are pulled and make this task
    depend on the producing task.
    """

    template_fields: ClassVar[Sequence[str]] = ()
    template_ext: ClassVar[Sequence[str]] = ()
    template_fields_renderers: ClassVar[dict[str, str]] = {}
    # Start in the triggerer instead of a worker (set both, on the class or the instance).
    start_from_trigger: bool = False
    start_trigger_args: StartTriggerArgs | None = None
    _from_mapped: bool = False
    _init_depth: int = 0
    # ids of values pulled from XCom while unmapping: rendering leaves them untouched
    _resolved_oids: frozenset[int] = frozenset()
    # The templated fields as rendered, once render_template_fields has run.
    _rendered_template_fields: dict[str, Any] | None = None

    def __init__(
        self,
        *,
        task_id: str,
        owner: str = DEFAULT_OWNER,
        retries: int | None = 0,
        retry_delay: timedelta | float = DEFAULT_RETRY_DELAY,
        retry_exponential_backoff: bool = False,
        max_retry_delay: timedelta | float | None = None,
        execution_timeout: timedelta | float | None = None,
        trigger_rule: str = TriggerRule.ALL_SUCCESS,
        queue: str = DEFAULT_QUEUE,
        pool: str | None = None,
        pool_slots: int = 1,
        max_active_tis_per_dag: int | None = None,
        max_active_tis_per_dagrun: int | None = None,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_batch_latency: timedelta | float = DEFAULT_MAX_BATCH_LATENCY,
        max_pending_events: int = DEFAULT_MAX_PENDING_EVENTS,
        stream_retry: str = "restart",
        do_xcom_push: bool = True,
        multiple_outputs: bool = False,
        doc: str | None = None,
        doc_md: str | None = None,
        map_index_template: str | None = None,
        params: Mapping[str, Any] | None = None,
        default_args: Mapping[str, Any] | None = None,
        dag: DAG | None = None,
        task_group: TaskGroup | None = None,
        start_date: datetime | None = None,
        end_date: datetime | None = None,
        depends_on_past: bool = False,
        wait_for_downstream: bool = False,
        priority_weight: int = 1,
        weight_rule: str = "downstream",
        email: str | Iterable[str] | None = None,
        email_on_failure: bool = True,
        email_on_retry: bool = True,
        on_execute_callback: Callbacks = None,
        on_failure_callback: Callbacks = None,
        on_success_callback: Callbacks = None,
        on_retry_callback: Callbacks = None,
        on_skipped_callback: Callbacks = None,
        sla: Any = None,
        executor_config: Mapping[str, Any] | None = None,
        task_display_name: str | None = None,
        inlets: Any = None,
        outlets: Any = None,
        **kwargs: Any,
    ) -> None:
        dag = dag or (task_group.dag if task_group is not None else None) or current_dag()
        dag_id = dag.dag_id if dag is not None else None
        if kwargs:
            refuse_unknown_args(
                [k.__name__ for k in type(self).__mro__],
                kwargs,
                kind=type(self).__name__,
                dag_id=dag_id,
                task_id=task_id,
            )
        validate_id(task_id, kind="task", dag_id=dag_id)
        self.task_group = task_group or current_group(dag)
        self.task_id = self.task_group.child_id(task_id) if self.task_group else task_id
        validate_id(self.task_id, kind="task", dag_id=dag_id)
        refuse_ignored_task_args(
            {
                "sla": sla,
            },
            dag_id=dag_id,
            task_id=self.task_id,
        )
        self.owner = owner
        self.retries = int(retries or 0)
        delay = as_timedelta(retry_delay)
        self.retry_delay = DEFAULT_RETRY_DELAY if delay is None else delay
        self.retry_exponential_backoff = retry_exponential_backoff
        self.max_retry_delay = as_timedelta(max_retry_delay)
        self.execution_timeout = as_timedelta(execution_timeout)
        self.trigger_rule = TriggerRule.parse(trigger_rule, task_id=self.task_id, dag_id=dag_id)
        self.queue = queue
        self.pool = pool or DEFAULT_POOL
        self.pool_slots = check_pool_slots(pool_slots, dag_id=dag_id, task_id=self.task_id)
        self.max_active_tis_per_dag = max_active_tis_per_dag
        self.max_active_tis_per_dagrun = max_active_tis_per_dagrun
        # Streaming consumption: events per handler call, how long a partial batch may
        # wait, and how far a trigger may run ahead of this task (backpressure).
        self.max_batch_size = max(1, int(max_batch_size))
        self.max_batch_latency = as_timedelta(max_batch_latency) or timedelta(0)
        self.max_pending_events = max(1, int(max_pending_events))
        # What a retry of a task consuming a stream does: "restart" the trigger run (and
        # the output stream), or "resume" after the last acknowledged event; "dead_letter"
        # resumes too, and a batch that fails every try goes to the dead letters.
        if stream_retry not in STREAM_RETRY_MODES:
            raise DagDefinitionError(
                f"stream_retry={stream_retry!r} is not one of {', '.join(STREAM_RETRY_MODES)}",
                dag_id=dag_id,
                task_id=self.task_id,
                field="stream_retry",
            )
        self.stream_retry = stream_retry
        self.do_xcom_push = do_xcom_push
        self.multiple_outputs = multiple_outputs
        self.doc = doc
        self.doc_md = doc_md
        self.map_index_template = map_index_template
        self.params = ParamsDict(params)
        self.default_args = dict(default_args or {})
        self.start_date = as_utc(start_date)
        self.end_date = as_utc(end_date)
        # As in Airflow, waiting for the previous run's downstream implies depending on it.
        self.wait_for_downstream = bool(wait_for_downstream)
        self.depends_on_past = bool(depends_on_past) or self.wait_for_downstream
        self.priority_weight, self.weight_rule = check_priority(
            priority_weight, weight_rule, dag_id=dag_id, task_id=self.task_id
        )
        self.email = email
        self.email_on_failure = email_on_failure
        self.email_on_retry = email_on_retry
        # Each a list of callables, called in the worker with the task's context.
        where = {"dag_id": dag_id, "task_id": self.task_id}
        self.on_execute_callback = as_callbacks(
            on_execute_callback, name="on_execute_callback", **where
        )
        self.on_failure_callback = as_callbacks(
            on_failure_callback, name="on_failure_callback", **where
        )
        self.on_success_callback = as_callbacks(
            on_success_callback, name="on_success_callback", **where
        )
        self.on_retry_callback = as_callbacks(on_retry_callback, name="on_retry_callback", **where)
        self.on_skipped_callback = as_callbacks(
            on_skipped_callback, name="on_skipped_callback", **where
        )
        self.executor_config = dict(executor_config or {})
        self.task_display_name = task_display_name or self.task_id
        self.inlets = check_inlets(inlets, dag_id=dag_id, task_id=self.task_id)
        self.outlets = check_outlets(outlets, dag_id=dag_id, task_id=self.task_id)
        self.upstream_task_ids = set()
        self.downstream_task_ids = set()
        self.dag = None
        if dag is not None:
            if self._from_mapped:
                self.dag = dag
                self.params = dag.params.merged(self.params)
            else:
                dag.add_task(self)

    # -- execution hooks ----------------------------------------------------------------

    @property
    def log(self) -> logging.Logger:
        """This operator's logger; its lines go to the task's log for the try."""
        return logging.getLogger(f"tailrace.task.operators.{type(self).__name__}")

    def pre_execute(self, context: Context) -> None:
        """Called just before :meth:`execute`."""

    def execute(self, context: Context) -> Any:
        """Do the task's work; the return value is pushed as the ``return_value`` XCom.

        Not abstract, as in Airflow: an operator that starts from its trigger
        (``start_from_trigger``) need not define it. Any other operator must; the DAG's
        validation says so at parse time.
        """
        raise NotImplementedError(
            f"{type(self).__name__} (task '{self.task_id}') defines no execute() method"
        )

    def post_execute(self, context: Context, result: Any = None) -> None:
        """Called just after :meth:`execute` returned ``result``."""

    def on_kill(self) -> None:
        """Called when the task is killed; release external resources here."""

    def defer(
        self,
        *,
        trigger: BaseTrigger,
        method_name: str,
        kwargs: Mapping[str, Any] | None = None,
        timeout: timedelta | float | None = None,
        timeout_outcome: str = "failed",
    ) -> NoReturn:
        """Suspend this task until ``trigger`` fires, freeing its worker slot.

        Raises :class:`~tailrace.sdk.TaskDeferred`. When the trigger yields an event, the
        task resumes in a worker (on a fresh copy of the operator, templates rendered
        again) by calling ``method_name(context, event=<payload>, **kwargs)``; what that
        returns becomes the task's XCom, and it may defer again. ``timeout`` (a timedelta
        or seconds) fails the task if the trigger has not fired by then — under its retry
        rules, or as ``timeout_outcome`` says: ``"failed_no_retry"``, ``"skipped"``. Example::

            class WaitOperator(BaseOperator):
                def execute(self, context):
                    self.defer(
                        trigger=TimeDeltaTrigger(timedelta(hours=1)),
                        method_name="execute_complete",
                    )

                def execute_complete(self, context, event=None):
                    return event

        The trigger's arguments and ``kwargs`` must be JSON-safe: they are stored.
        """
        if not isinstance(trigger, BaseTrigger):
            raise TypeError(
                f"Task '{self.task_id}' deferred to {trigger!r}, which is not a BaseTrigger"
            )
        if method_name != RESUME_TASKFLOW and not callable(getattr(self, method_name, None)):
            raise TypeError(
                f"Task '{self.task_id}' deferred with method_name={method_name!r}, but "
                f"{type(self).__name__} has no such method to resume in"
            )
        dag_id = self.dag.dag_id if self.dag is not None else None
        _, trigger_kwargs = trigger.serialize()
        check_trigger_kwargs(trigger_kwargs, dag_id=dag_id, task_id=self.task_id)
        resume_kwargs = dict(kwargs or {})
        check_trigger_kwargs(
            resume_kwargs, dag_id=dag_id, task_id=self.task_id, what="resume method"
        )
        raise TaskDeferred(
            trigger=trigger,
            method_name=method_name,
            kwargs=resume_kwargs,
            timeout=as_timedelta(timeout),
            timeout_outcome=timeout_outcome,
        )

    # -- templating ---------------------------------------------------------------------

    def get_template_env(self) -> jinja2.Environment:
        """The Jinja environment of the task's DAG (a plain one without a DAG)."""
        if self.dag is not None:
            return self.dag.get_template_env()
        from tailrace.sdk._templating import create_environment

        return create_environment()

    def render_template_fields(
        self, context: Context, jinja_env: jinja2.Environment | None = None
    ) -> None:
        """Render every attribute named in ``template_fields`` in place."""
        from tailrace.sdk._templating import render_field

        env = jinja_env or self.get_template_env()
        for field in self.template_fields:
            value = getattr(self, field)
            rendered = render_field(
                self.task_id,
                field,
                value,
                context,
                env,
                self.template_ext,
                seen=set(self._resolved_oids),
            )
            setattr(self, field, rendered)
        self._rendered_template_fields = {f: getattr(self, f) for f in self.template_fields}

    def render_template(
        self, content: Any, context: Context, jinja_env: jinja2.Environment | None = None
    ) -> Any:
        """Render ``content`` (a string, XComArg, or container of them) with ``context``."""
        from tailrace.sdk._templating import render_value

        env = jinja_env or self.get_template_env()
        return render_value(content, context, env, template_ext=self.template_ext)

    # -- XCom references / mapping --------------------------------------------------------

    def iter_xcom_args(self) -> Iterable[XComArg]:
        for field in self.template_fields:
            yield from find_xcom_args(getattr(self, field, None))

    @classmethod
    def partial(cls, **kwargs: Any) -> OperatorPartial:
        """Fix arguments shared by every mapped instance; follow with ``.expand(...)``."""
        from tailrace.sdk._mapped import OperatorPartial

        return OperatorPartial(cls, kwargs)


def _as_nodes(value: Any) -> list[DependencyMixin] | DependencyMixin:
    if isinstance(value, DependencyMixin):
        return value
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    raise TypeError(f"chain() takes tasks, task groups, XComArgs or lists of them; got {value!r}")


def chain(*elements: DependencyMixin | Sequence[DependencyMixin]) -> None:
    """Link the elements one after another: ``chain(a, [b, c], d)`` is ``a >> [b, c] >> d``.

    Two adjacent lists must have equal length and are linked pairwise:
    ``chain(a, [b, c], [d, e])`` sets ``b >> d`` and ``c >> e``.
    """
    for up_raw, down_raw in itertools.pairwise(elements):
        up, down = _as_nodes(up_raw), _as_nodes(down_raw)
        if isinstance(up, DependencyMixin):
            up.set_downstream(down)
        elif isinstance(down, DependencyMixin):
            down.set_upstream(up)
        else:
            if len(up) != len(down):
                raise ValueError(
                    f"chain() can only link lists of equal length pairwise; got lengths "
                    f"{len(up)} and {len(down)}"
                )
            for u, d in zip(up, down, strict=True):
                u.set_downstream(d)


def chain_linear(*elements: DependencyMixin | Sequence[DependencyMixin]) -> None:
    """Link every task of each element to every task of the next, as Airflow's:
    ``chain_linear(a, [b, c], [d, e])`` sets ``a >> [b, c]``, ``b >> [d, e]``,
    ``c >> [d, e]``."""
    if len(elements) < 2:
        raise ValueError("chain_linear() needs at least two elements")
    for up_raw, down_raw in itertools.pairwise(elements):
        up, down = _as_nodes(up_raw), _as_nodes(down_raw)
        for u in [up] if isinstance(up, DependencyMixin) else up:
            u.set_downstream(down)


def cross_downstream(
    from_tasks: Sequence[DependencyMixin], to_tasks: DependencyMixin | Sequence[DependencyMixin]
) -> None:
    """Make every task in ``to_tasks`` run after every task in ``from_tasks``."""
    for task in from_tasks:
        task.set_downstream(to_tasks)
