"""Task groups: named, nestable sets of tasks that prefix their task ids."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from tailrace.sdk._contextstack import current_dag, current_group, pop_group, push_group
from tailrace.sdk._node import AbstractOperator, DependencyMixin
from tailrace.sdk._types import validate_id
from tailrace.sdk.errors import DagDefinitionError, DuplicateTaskIdError

if TYPE_CHECKING:
    from tailrace.sdk._dag import DAG

_P = ParamSpec("_P")
_R = TypeVar("_R")


class TaskGroup(DependencyMixin):
    """A group of tasks, used as a context manager; its id prefixes the ids of its tasks.

    ``with TaskGroup("extract") as tg: a = ...`` gives ``a`` the id ``"extract.a"`` (unless
    ``prefix_group_id=False``). Groups nest, take part in ``>>`` (their roots and leaves are
    linked) and may carry ``default_args`` for the tasks inside.
    """

    def __init__(
        self,
        group_id: str | None,
        prefix_group_id: bool = True,
        parent_group: TaskGroup | None = None,
        dag: DAG | None = None,
        default_args: Mapping[str, Any] | None = None,
        tooltip: str = "",
        ui_color: str = "CornflowerBlue",
        ui_fgcolor: str = "#000",
        add_suffix_on_collision: bool = False,
    ) -> None:
        self._group_id = group_id
        self.prefix_group_id = prefix_group_id
        self.default_args: dict[str, Any] = dict(default_args or {})
        self.tooltip = tooltip
        self.ui_color = ui_color
        self.ui_fgcolor = ui_fgcolor
        self.children: dict[str, AbstractOperator | TaskGroup] = {}
        if group_id is None:  # the root group of a DAG
            if dag is None:
                raise DagDefinitionError("A root task group needs its DAG")
            self.dag: DAG = dag
            self.parent_group: TaskGroup | None = None
            return
        found_dag = dag or (parent_group.dag if parent_group else None) or current_dag()
        if found_dag is None:
            raise DagDefinitionError(
                f"Task group '{group_id}' was created outside a DAG",
                task_id=group_id,
                field="group_id",
                hint="Create it inside 'with DAG(...)' or pass dag=.",
            )
        validate_id(group_id, kind="task group", dag_id=found_dag.dag_id)
        self.dag = found_dag
        self.parent_group = parent_group or current_group(found_dag)
        if add_suffix_on_collision:
            self._group_id = self._unique_id(group_id)
        full_id = self.group_id
        assert full_id is not None
        if full_id in found_dag.task_group_dict or full_id in found_dag.task_dict:
            raise DuplicateTaskIdError(dag_id=found_dag.dag_id, task_id=full_id, kind="task group")
        found_dag.task_group_dict[full_id] = self
        if self.parent_group is not None:
            self.parent_group.children[full_id] = self

    def _unique_id(self, group_id: str) -> str:
        taken = set(self.dag.task_group_dict) | set(self.dag.task_dict)
        if self._full_id(group_id) not in taken:
            return group_id
        core = re.split(r"__\d+$", group_id)[0]
        n = 1
        while self._full_id(f"{core}__{n}") in taken:
            n += 1
        return f"{core}__{n}"

    def _full_id(self, own_id: str) -> str:
        parent = self.parent_group
        if parent is not None and parent.prefix_group_id and parent._group_id:
            return parent.child_id(own_id)
        return own_id

    def __repr__(self) -> str:
        return f"<TaskGroup: {self.group_id}>"

    @property
    def group_id(self) -> str | None:
        """The full id (with parent prefixes); ``None`` for a DAG's root group."""
        if self._group_id is None:
            return None
        return self._full_id(self._group_id)

    @property
    def label(self) -> str | None:
        """The id without parent prefixes."""
        return self._group_id

    @property
    def is_root(self) -> bool:
        return self._group_id is None

    def child_id(self, label: str) -> str:
        """The id a child called ``label`` gets in this group."""
        if self.prefix_group_id:
            group_id = self.group_id
            if group_id:
                return f"{group_id}.{label}"
        return label

    def get_default_args(self) -> dict[str, Any]:
        """``default_args`` of the enclosing groups, overridden by this group's."""
        merged = self.parent_group.get_default_args() if self.parent_group else {}
        merged.update(self.default_args)
        return merged

    def add(self, task: AbstractOperator) -> None:
        self.children[task.task_id] = task

    def iter_tasks(self) -> Iterator[AbstractOperator]:
        """Every task in this group and its subgroups."""
        for child in self.children.values():
            if isinstance(child, TaskGroup):
                yield from child.iter_tasks()
            else:
                yield child

    @property
    def roots(self) -> list[AbstractOperator]:
        tasks = list(self.iter_tasks())
        ids = {t.task_id for t in tasks}
        return [t for t in tasks if not (t.upstream_task_ids & ids)]

    @property
    def leaves(self) -> list[AbstractOperator]:
        tasks = list(self.iter_tasks())
        ids = {t.task_id for t in tasks}
        return [t for t in tasks if not (t.downstream_task_ids & ids)]

    def __enter__(self) -> TaskGroup:
        push_group(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pop_group()


class _TaskGroupFactory(Generic[_P, _R]):
    def __init__(self, function: Callable[_P, _R], kwargs: dict[str, Any]) -> None:
        self.function = function
        self.kwargs = kwargs
        functools.update_wrapper(self, function)

    def override(self, **kwargs: Any) -> _TaskGroupFactory[_P, _R]:
        """A copy with other :class:`TaskGroup` arguments (e.g. ``group_id``)."""
        return _TaskGroupFactory(self.function, {**self.kwargs, **kwargs})

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> Any:
        tg_kwargs = dict(self.kwargs)
        group_id = tg_kwargs.pop("group_id", None) or self.function.__name__
        tg_kwargs.setdefault("add_suffix_on_collision", True)
        if not tg_kwargs.get("tooltip") and self.function.__doc__:
            tg_kwargs["tooltip"] = self.function.__doc__.strip()
        with TaskGroup(group_id, **tg_kwargs) as group:
            result = self.function(*args, **kwargs)
        if isinstance(result, DependencyMixin):
            return result
        return group


@overload
def task_group(python_callable: Callable[_P, _R]) -> _TaskGroupFactory[_P, _R]: ...
@overload
def task_group(
    python_callable: None = None, **kwargs: Any
) -> Callable[[Callable[_P, _R]], _TaskGroupFactory[_P, _R]]: ...


def task_group(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """Decorate a function that creates tasks; each call creates a :class:`TaskGroup`.

    The group id defaults to the function name (``name__1``, ``name__2`` ... on repeated
    calls). The call returns what the function returns if that is a task or XComArg,
    else the group, so ``extract() >> load()`` works either way.
    """
    if python_callable is not None:
        return _TaskGroupFactory(python_callable, kwargs)

    def decorator(f: Callable[_P, _R]) -> _TaskGroupFactory[_P, _R]:
        return _TaskGroupFactory(f, kwargs)

    return decorator
