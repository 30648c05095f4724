"""What every node of a DAG graph shares: the ``>>``/``<<`` vocabulary and task relatives."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, Union

from tailrace.sdk._trigger_rule import TriggerRule
from tailrace.sdk._types import XCOM_RETURN_KEY
from tailrace.sdk.errors import DagDefinitionError

if TYPE_CHECKING:
    from tailrace.sdk._assets import Asset, AssetAlias, BaseAsset
    from tailrace.sdk._dag import DAG
    from tailrace.sdk._taskgroup import TaskGroup
    from tailrace.sdk._xcom_arg import XComArg

Relatives = Union["DependencyMixin", Sequence["DependencyMixin"]]
_T = TypeVar("_T")


def _flatten(other: Relatives) -> list[DependencyMixin]:
    if isinstance(other, DependencyMixin):
        return [other]
    if isinstance(other, Sequence) and not isinstance(other, str):
        result: list[DependencyMixin] = []
        for item in other:
            result.extend(_flatten(item))
        return result
    raise TypeError(
        f"Dependencies can only be set between tasks, task groups, XComArgs or lists of "
        f"them; got {type(other).__name__}: {other!r}"
    )


class DependencyMixin:
    """``a >> b``, ``a << b``, ``set_upstream``/``set_downstream`` for tasks, groups, XComArgs.

    Either side of ``>>`` may be a list: ``a >> [b, c] >> d``.
    """

    @property
    def roots(self) -> list[AbstractOperator]:
        """The tasks an upstream dependency attaches to."""
        raise NotImplementedError

    @property
    def leaves(self) -> list[AbstractOperator]:
        """The tasks a downstream dependency attaches to."""
        raise NotImplementedError

    def set_downstream(self, other: Relatives) -> None:
        """Make ``other`` run after this."""
        for node in _flatten(other):
            if isinstance(node, EdgeModifier):
                node.add_upstream(self.leaves)
                continue
            for leaf in self.leaves:
                for root in node.roots:
                    leaf._add_edge(root)

    def set_upstream(self, other: Relatives) -> None:
        """Make ``other`` run before this."""
        for node in _flatten(other):
            node.set_downstream(self)

    def __rshift__(self, other: _T) -> _T:
        self.set_downstream(other)  # type: ignore[arg-type]
        return other

    def __lshift__(self, other: _T) -> _T:
        self.set_upstream(other)  # type: ignore[arg-type]
        return other

    def __rrshift__(self, other: Relatives) -> DependencyMixin:
        self.set_upstream(other)
        return self

    def __rlshift__(self, other: Relatives) -> DependencyMixin:
        self.set_downstream(other)
        return self


class AbstractOperator(DependencyMixin):
    """A task of a DAG: a concrete :class:`BaseOperator` or a :class:`MappedOperator`."""

    template_fields: ClassVar[Sequence[str]] = ()
    template_ext: ClassVar[Sequence[str]] = ()
    template_fields_renderers: ClassVar[dict[str, str]] = {}
    ui_color: str = "#fff"
    ui_fgcolor: str = "#000"

    task_id: str
    dag: DAG | None
    task_group: TaskGroup | None
    upstream_task_ids: set[str]
    downstream_task_ids: set[str]
    owner: str
    retries: int
    retry_delay: timedelta
    retry_exponential_backoff: bool
    max_retry_delay: timedelta | None
    execution_timeout: timedelta | None
    trigger_rule: TriggerRule
    queue: str
    pool: str
    pool_slots: int
    max_active_tis_per_dag: int | None
    depends_on_past: bool
    wait_for_downstream: bool
    priority_weight: int
    weight_rule: str
    max_batch_size: int
    max_batch_latency: timedelta
    max_pending_events: int
    stream_retry: str
    do_xcom_push: bool
    multiple_outputs: bool
    doc: str | None
    doc_md: str | None
    map_index_template: str | None
    # Assets: read (inlets) and updated on success (outlets).
    inlets: list[BaseAsset]
    outlets: list[Asset | AssetAlias]

    is_mapped: ClassVar[bool] = False
    # Setup and teardown tasks (Airflow 2.7+): see as_setup() and as_teardown().
    is_setup: bool = False
    is_teardown: bool = False
    on_failure_fail_dagrun: bool = False

    def __repr__(self) -> str:
        return f"<Task({type(self).__name__}): {getattr(self, 'task_id', '?')}>"

    def as_setup(self) -> AbstractOperator:
        """Mark this task as a setup task: it prepares a resource its work tasks use, and
        clearing one of them clears it too. Returns the task."""
        self.is_setup = True
        return self

    def as_teardown(
        self,
        *,
        setups: DependencyMixin | Iterable[DependencyMixin] | None = None,
        on_failure_fail_dagrun: bool | None = None,
    ) -> AbstractOperator:
        """Mark this task as a teardown task, as Airflow does: its trigger rule becomes
        ``all_done_setup_success`` (it runs once its upstream tasks are done, failed work
        included, if a setup among them succeeded); its own state decides the run's
        only with ``on_failure_fail_dagrun=True``. ``setups`` are marked as setups and set
        upstream of this task. Returns the task."""
        self.is_teardown = True
        self.trigger_rule = TriggerRule.ALL_DONE_SETUP_SUCCESS
        if on_failure_fail_dagrun is not None:
            self.on_failure_fail_dagrun = on_failure_fail_dagrun
        if setups is not None:
            for setup in [setups] if isinstance(setups, DependencyMixin) else list(setups):
                mark_setup(setup)
                setup.set_downstream(self)
        return self

    def __enter__(self) -> AbstractOperator:
        from tailrace.sdk._setup_teardown import enter_scope

        enter_scope(self)
        return self

    def __exit__(self, *exc: object) -> None:
        from tailrace.sdk._setup_teardown import exit_scope

        exit_scope(self)

    # -- graph ------------------------------------------------------------------------

    @property
    def roots(self) -> list[AbstractOperator]:
        return [self]

    @property
    def leaves(self) -> list[AbstractOperator]:
        return [self]

    @property
    def dag_id(self) -> str | None:
        return self.dag.dag_id if self.dag is not None else None

    @property
    def label(self) -> str:
        """The task id without its task group prefix."""
        group = self.task_group
        if group is not None and group.group_id and group.prefix_group_id:
            prefix = f"{group.group_id}."
            if self.task_id.startswith(prefix):
                return self.task_id[len(prefix) :]
        return self.task_id

    def _add_edge(self, downstream: AbstractOperator) -> None:
        dag = self.dag or downstream.dag
        if self.dag is not None and downstream.dag is not None and self.dag is not downstream.dag:
            raise DagDefinitionError(
                f"Cannot set a dependency between task '{self.task_id}' of DAG "
                f"'{self.dag.dag_id}' and task '{downstream.task_id}' of DAG "
                f"'{downstream.dag.dag_id}'",
                dag_id=self.dag.dag_id,
                task_id=self.task_id,
                hint="Dependencies can only connect tasks of the same DAG.",
            )
        if dag is not None:
            for task in (self, downstream):
                if task.dag is None:
                    dag.add_task(task)
        self.downstream_task_ids.add(downstream.task_id)
        if dag is not None:
            # Where the author wrote the dependency: a cycle error points at it.
            dag.edge_locations[(self.task_id, downstream.task_id)] = _author_location()
        downstream.upstream_task_ids.add(self.task_id)

    def _require_dag(self) -> DAG:
        if self.dag is None:
            raise DagDefinitionError(
                f"Task '{self.task_id}' is not part of any DAG",
                task_id=self.task_id,
                hint="Create it inside 'with DAG(...)' or pass dag=.",
            )
        return self.dag

    @property
    def upstream_list(self) -> list[AbstractOperator]:
        """The direct upstream tasks."""
        dag = self._require_dag()
        return [dag.get_task(t) for t in sorted(self.upstream_task_ids)]

    @property
    def downstream_list(self) -> list[AbstractOperator]:
        """The direct downstream tasks."""
        dag = self._require_dag()
        return [dag.get_task(t) for t in sorted(self.downstream_task_ids)]

    def get_direct_relative_ids(self, upstream: bool = False) -> set[str]:
        """Ids of the direct upstream (or downstream) tasks."""
        return set(self.upstream_task_ids if upstream else self.downstream_task_ids)

    def get_direct_relatives(self, upstream: bool = False) -> list[AbstractOperator]:
        """The direct upstream (or downstream) tasks."""
        return self.upstream_list if upstream else self.downstream_list

    def get_flat_relative_ids(self, *, upstream: bool = False) -> set[str]:
        """Ids of all transitive upstream (or downstream) tasks."""
        dag = self._require_dag()
        seen: set[str] = set()
        stack = list(self.get_direct_relative_ids(upstream))
        while stack:
            task_id = stack.pop()
            if task_id in seen:
                continue
            seen.add(task_id)
            stack.extend(dag.get_task(task_id).get_direct_relative_ids(upstream))
        return seen

    def get_flat_relatives(self, upstream: bool = False) -> list[AbstractOperator]:
        """All transitive upstream (or downstream) tasks."""
        dag = self._require_dag()
        return [dag.get_task(t) for t in sorted(self.get_flat_relative_ids(upstream=upstream))]

    # -- XCom ---------------------------------------------------------------------------

    @property
    def output(self) -> XComArg:
        """A reference to this task's return value, to pass to other tasks."""
        from tailrace.sdk._xcom_arg import PlainXComArg

        return PlainXComArg(self, XCOM_RETURN_KEY)

    def iter_xcom_args(self) -> Iterable[XComArg]:
        """Every XComArg this task's arguments reference."""
        return ()

    def iter_xcom_dependencies(self) -> list[tuple[str, str]]:
        """``(task_id, key)`` of every XCom this task's arguments reference, de-duplicated."""
        seen: dict[tuple[str, str], None] = {}
        for arg in self.iter_xcom_args():
            for operator, key in arg.iter_references():
                seen[(operator.task_id, key)] = None
        return list(seen)

    def _set_xcomargs_dependencies(self) -> None:
        for arg in self.iter_xcom_args():
            for operator, _ in arg.iter_references():
                if operator is not self:
                    operator.set_downstream(self)


def find_xcom_args(value: Any, _seen: set[int] | None = None) -> list[XComArg]:
    """All XComArgs inside ``value`` (nested in lists, tuples, sets and dicts)."""
    from tailrace.sdk._xcom_arg import XComArg

    if isinstance(value, XComArg):
        return [value]
    seen = _seen if _seen is not None else set()
    if id(value) in seen:
        return []
    found: list[XComArg] = []
    if isinstance(value, list | tuple | set | frozenset):
        seen.add(id(value))
        for item in value:
            found.extend(find_xcom_args(item, seen))
    elif isinstance(value, dict):
        seen.add(id(value))
        for item in value.values():
            found.extend(find_xcom_args(item, seen))
    return found


_SDK_DIR = os.path.dirname(os.path.abspath(__file__))


def _author_location() -> tuple[str, int]:
    """(file, line) of the innermost frame outside the SDK: the author's code."""
    frame = sys._getframe(1)
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _SDK_DIR
    ):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


def mark_setup(node: DependencyMixin) -> None:
    """``node.as_setup()`` for a task or an XComArg (its tasks)."""
    as_setup = getattr(node, "as_setup", None)
    if as_setup is None:
        raise TypeError(f"setups= takes tasks or XComArgs, got {node!r}")
    as_setup()


class EdgeModifier(DependencyMixin):
    """Airflow's ``Label``: ``a >> Label("on success") >> b`` sets ``a >> b`` and records
    the label for that edge in the DAG's ``edge_info``; the UI's graph draws it on the
    edge."""

    def __init__(self, label: str | None = None) -> None:
        self.label = label
        self._upstream: list[AbstractOperator] = []

    def __repr__(self) -> str:
        return f"Label({self.label!r})"

    @property
    def roots(self) -> list[AbstractOperator]:
        return []

    @property
    def leaves(self) -> list[AbstractOperator]:
        return list(self._upstream)

    def add_upstream(self, tasks: Sequence[AbstractOperator]) -> None:
        self._upstream.extend(t for t in tasks if t not in self._upstream)

    def set_downstream(self, other: Relatives) -> None:
        for node in _flatten(other):
            for up in self._upstream:
                for root in node.roots:
                    up._add_edge(root)
                    dag = up.dag or root.dag
                    if dag is not None and self.label is not None:
                        dag.edge_info.setdefault(up.task_id, {})[root.task_id] = {
                            "label": self.label
                        }


Label = EdgeModifier
