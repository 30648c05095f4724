"""TaskFlow: ``@task`` turns a function into a task; calling it wires the DAG."""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar, overload

from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._context import Context
from tailrace.sdk._contextstack import current_dag, current_group
from tailrace.sdk._mapped import DecoratedMappedOperator, check_mapped_arguments
from tailrace.sdk._xcom_arg import PlainXComArg, XComArg
from tailrace.sdk.errors import DagDefinitionError
from tailrace.sdk.operators.bash import BashOperator
from tailrace.sdk.operators.python import (
    BranchExternalPythonOperator,
    BranchPythonOperator,
    BranchPythonVirtualenvOperator,
    ExternalPythonOperator,
    PythonOperator,
    PythonVirtualenvOperator,
    ShortCircuitOperator,
    determine_kwargs,
)

_P = ParamSpec("_P")
_R = TypeVar("_R")

CONTEXT_KEYS = frozenset(Context.__required_keys__ | Context.__optional_keys__)


def unique_task_id(task_id: str, dag: Any, group: Any) -> str:
    """``task_id`` or, if the DAG already has it, ``task_id__1``, ``task_id__2`` ..."""
    if dag is None:
        return task_id

    def full(label: str) -> str:
        return str(group.child_id(label)) if group is not None else label

    if full(task_id) not in dag.task_dict:
        return task_id
    core = re.split(r"__\d+$", task_id)[0]
    n = 1
    while full(f"{core}__{n}") in dag.task_dict:
        n += 1
    return f"{core}__{n}"


def infer_multiple_outputs(function: Callable[..., Any]) -> bool:
    """True when the return annotation is a mapping type such as ``dict[str, int]``."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # unresolvable annotations: no inference
        return False
    return_type = hints.get("return")
    if return_type is None:
        return False
    origin = typing.get_origin(return_type) or return_type
    return isinstance(origin, type) and issubclass(origin, Mapping)


class _DecoratedMixin:
    """Shared by the operators ``@task`` variants create."""

    custom_operator_name: ClassVar[str] = "@task"

    def __init__(self, **kwargs: Any) -> None:
        self._unique(kwargs)
        super().__init__(**kwargs)

    def _unique(self, kwargs: dict[str, Any]) -> None:
        if getattr(self, "_from_mapped", False):
            return
        dag = kwargs.get("dag") or current_dag()
        group = kwargs.get("task_group") or current_group(dag)
        kwargs["task_id"] = unique_task_id(kwargs["task_id"], dag, group)


class _PythonDecoratedOperator(_DecoratedMixin, PythonOperator):
    pass


class _BranchPythonDecoratedOperator(_DecoratedMixin, BranchPythonOperator):
    custom_operator_name = "@task.branch"


class _ShortCircuitDecoratedOperator(_DecoratedMixin, ShortCircuitOperator):
    custom_operator_name = "@task.short_circuit"


class _VirtualenvDecoratedOperator(_DecoratedMixin, PythonVirtualenvOperator):
    custom_operator_name = "@task.virtualenv"


class _BranchVirtualenvDecoratedOperator(_DecoratedMixin, BranchPythonVirtualenvOperator):
    custom_operator_name = "@task.branch_virtualenv"


class _ExternalPythonDecoratedOperator(_DecoratedMixin, ExternalPythonOperator):
    custom_operator_name = "@task.external_python"


class _BranchExternalPythonDecoratedOperator(_DecoratedMixin, BranchExternalPythonOperator):
    custom_operator_name = "@task.branch_external_python"


class _BashDecoratedOperator(_DecoratedMixin, BashOperator):
    """``@task.bash``: the function returns the command, which is then rendered and run."""

    custom_operator_name = "@task.bash"
    template_fields: ClassVar[tuple[str, ...]] = ("env", "cwd", "op_args", "op_kwargs")

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Any = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("multiple_outputs", None)
        super().__init__(bash_command="", **kwargs)
        self.python_callable = python_callable
        self.op_args = list(op_args or ())
        self.op_kwargs = dict(op_kwargs or {})

    def execute(self, context: Context) -> Any:
        available: dict[str, Any] = {**context, **self.op_kwargs}
        kwargs = determine_kwargs(self.python_callable, self.op_args, available)
        command = self.python_callable(*self.op_args, **kwargs)
        if not isinstance(command, str) or not command.strip():
            raise TypeError(
                f"The @task.bash function of task '{self.task_id}' must return a non-empty "
                f"string (the command), got {command!r}"
            )
        self.bash_command = self.render_template(command, context)
        return super().execute(context)


def _check_arguments(
    function: Callable[..., Any],
    task_id: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    complete: bool,
) -> None:
    sig = inspect.signature(function)
    dag = current_dag()
    try:
        bound = sig.bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise DagDefinitionError(
            f"Invalid arguments for task function '{function.__name__}': {exc}",
            dag_id=dag.dag_id if dag else None,
            task_id=task_id,
            hint="Call it with the arguments its signature takes.",
        ) from None
    if not complete:
        return
    missing = [
        p.name
        for p in sig.parameters.values()
        if p.name not in bound.arguments
        and p.default is p.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name not in CONTEXT_KEYS
    ]
    if missing:
        raise DagDefinitionError(
            f"Task function '{function.__name__}' is missing argument(s) {missing}",
            dag_id=dag.dag_id if dag else None,
            task_id=task_id,
            field=missing[0],
            hint="Pass every argument without a default (context values such as 'ti' "
            "are filled in at run time).",
        )


class _TaskDecorator(Generic[_P, _R]):
    """A function decorated with ``@task``: call it inside a DAG to create a task.

    The call returns an :class:`XComArg` for the function's return value; XComArgs
    passed as arguments make the new task depend on their tasks.
    """

    def __init__(
        self,
        function: Callable[_P, _R],
        operator_class: type[BaseOperator],
        kwargs: Mapping[str, Any],
    ) -> None:
        self.function = function
        self.operator_class = operator_class
        self.kwargs = dict(kwargs)
        # Set by @setup / @teardown.
        self.is_setup = False
        self.is_teardown = False
        self.on_failure_fail_dagrun = False
        functools.update_wrapper(self, function)

    @property
    def task_id(self) -> str:
        return str(self.kwargs.get("task_id") or self.function.__name__)

    def _operator_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.kwargs)
        kwargs["task_id"] = self.task_id
        if kwargs.get("multiple_outputs") is None:
            kwargs["multiple_outputs"] = infer_multiple_outputs(self.function)
        return kwargs

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> XComArg:
        _check_arguments(self.function, self.task_id, args, dict(kwargs), complete=True)
        op = self.operator_class(
            python_callable=self.function,
            op_args=args,
            op_kwargs=kwargs,
            **self._operator_kwargs(),
        )
        if self.is_setup:
            op.as_setup()
        if self.is_teardown:
            op.as_teardown(on_failure_fail_dagrun=self.on_failure_fail_dagrun)
        return PlainXComArg(op)

    def override(self, **kwargs: Any) -> _TaskDecorator[_P, _R]:
        """A copy with other operator arguments (``task_id``, ``retries`` ...)."""
        copy = _TaskDecorator(self.function, self.operator_class, {**self.kwargs, **kwargs})
        copy.is_setup = self.is_setup
        copy.is_teardown = self.is_teardown
        copy.on_failure_fail_dagrun = self.on_failure_fail_dagrun
        return copy

    def partial(self, **kwargs: Any) -> _TaskPartial:
        """Fix some function arguments for every mapped instance; then ``.expand(...)``."""
        _check_arguments(self.function, self.task_id, (), kwargs, complete=False)
        return _TaskPartial(self, kwargs)

    def expand(self, **mapped_kwargs: Any) -> XComArg:
        """Map the function over lists, dicts or XComArgs: one task instance per item."""
        return _TaskPartial(self, {}).expand(**mapped_kwargs)

    def iterate(self, **mapped_kwargs: Any) -> XComArg:
        """Map the function over items as they arrive (streams, lists, combinators)."""
        return _TaskPartial(self, {}).iterate(**mapped_kwargs)


class _TaskPartial:
    def __init__(self, decorator: _TaskDecorator[Any, Any], kwargs: dict[str, Any]) -> None:
        self.decorator = decorator
        self.kwargs = kwargs

    def expand(self, **mapped_kwargs: Any) -> XComArg:
        return self._mapped("expand", mapped_kwargs)

    def iterate(self, **mapped_kwargs: Any) -> XComArg:
        return self._mapped("iterate", mapped_kwargs)

    def _mapped(self, method: str, mapped_kwargs: dict[str, Any]) -> XComArg:
        decorator = self.decorator
        task_id = decorator.task_id
        dag = decorator.kwargs.get("dag") or current_dag()
        check_mapped_arguments(
            mapped_kwargs,
            method=method,
            task_id=task_id,
            dag_id=dag.dag_id if dag else None,
            partial_kwargs=self.kwargs,
        )
        _check_arguments(
            decorator.function, task_id, (), {**self.kwargs, **mapped_kwargs}, complete=True
        )
        op_kwargs = decorator._operator_kwargs()
        group = op_kwargs.get("task_group") or current_group(dag)
        op_kwargs["task_id"] = unique_task_id(task_id, dag, group)
        op_kwargs.update(python_callable=decorator.function, op_args=(), op_kwargs=self.kwargs)
        mapped = DecoratedMappedOperator(
            operator_class=decorator.operator_class,
            partial_kwargs=op_kwargs,
            expand_input=mapped_kwargs,
            lazy=method == "iterate",
        )
        if decorator.is_setup:
            mapped.as_setup()
        if decorator.is_teardown:
            mapped.as_teardown(on_failure_fail_dagrun=decorator.on_failure_fail_dagrun)
        return PlainXComArg(mapped)


def _make(
    operator_class: type[BaseOperator],
    python_callable: Callable[..., Any] | None,
    kwargs: dict[str, Any],
) -> Any:
    if python_callable is not None:
        return _TaskDecorator(python_callable, operator_class, kwargs)

    def decorator(f: Callable[_P, _R]) -> _TaskDecorator[_P, _R]:
        return _TaskDecorator(f, operator_class, kwargs)

    return decorator


class TaskDecoratorCollection:
    """``@task`` and its variants ``@task.branch``, ``@task.short_circuit``, ``@task.bash``,
    ``@task.virtualenv``, ``@task.external_python`` and their ``branch_`` forms.

    ``@task`` or ``@task(task_id=..., retries=..., multiple_outputs=True, ...)`` take any
    operator argument. ``multiple_outputs`` defaults to True when the function's return
    annotation is a dict type: each key is then also pushed as its own XCom. Calling a
    task function again in the same DAG creates ``name__1``, ``name__2`` ...
    """

    @overload
    def __call__(self, python_callable: Callable[_P, _R]) -> _TaskDecorator[_P, _R]: ...
    @overload
    def __call__(
        self, python_callable: None = None, **kwargs: Any
    ) -> Callable[[Callable[_P, _R]], _TaskDecorator[_P, _R]]: ...
    def __call__(self, python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
        return _make(_PythonDecoratedOperator, python_callable, kwargs)

    @overload
    def python(self, python_callable: Callable[_P, _R]) -> _TaskDecorator[_P, _R]: ...
    @overload
    def python(
        self, python_callable: None = None, **kwargs: Any
    ) -> Callable[[Callable[_P, _R]], _TaskDecorator[_P, _R]]: ...
    def python(self, python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
        """Same as ``@task``."""
        return _make(_PythonDecoratedOperator, python_callable, kwargs)

    @overload
    def branch(self, python_callable: Callable[_P, _R]) -> _TaskDecorator[_P, _R]: ...
    @overload
    def branch(
        self, python_callable: None = None, **kwargs: Any
    ) -> Callable[[Callable[_P, _R]], _TaskDecorator[_P, _R]]: ...
    def branch(self, python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
        """The function returns the task id(s) (or task group ids) to follow; the other
        direct downstream tasks are skipped."""
        return _make(_BranchPythonDecoratedOperator, python_callable, kwargs)

    @overload
    def short_circuit(self, python_callable: Callable[_P, _R]) -> _TaskDecorator[_P, _R]: ...
    @overload
    def short_circuit(
        self, python_callable: None = None, **kwargs: Any
    ) -> Callable[[Callable[_P, _R]], _TaskDecorator[_P, _R]]: ...
    def short_circuit(
        self, python_callable: Callable[..., Any] | None = None, **kwargs: Any
    ) -> Any:
        """Downstream tasks are skipped when the function returns a falsy value."""
        return _make(_ShortCircuitDecoratedOperator, python_callable, kwargs)

    @overload
    def bash(self, python_callable: Callable[_P, _R]) -> _TaskDecorator[_P, _R]: ...
    @overload
    def bash(
        self, python_callable: None = None, **kwargs: Any
    ) -> Callable[[Callable[_P, _R]], _TaskDecorator[_P, _R]]: ...
    def bash(self, python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
        """The function returns a bash command, which runs like ``BashOperator``'s."""
        return _make(_BashDecoratedOperator, python_callable, kwargs)

    @overload
    def virtualenv(self, python_callable: Callable[_P, _R]) -> _TaskDecorator[_P, _R]: ...
    @overload
    def virtualenv(
        self, python_callable: None = None, **kwargs: Any
    ) -> Callable[[Callable[_P, _R]], _TaskDecorator[_P, _R]]: ...
    def virtualenv(self, python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
        """The function runs in a virtualenv with ``requirements`` installed
        (``PythonVirtualenvOperator``'s arguments), its source in a subprocess."""
        return _make(_VirtualenvDecoratedOperator, python_callable, kwargs)

    @overload
    def branch_virtualenv(self, python_callable: Callable[_P, _R]) -> _TaskDecorator[_P, _R]: ...
    @overload
    def branch_virtualenv(
        self, python_callable: None = None, **kwargs: Any
    ) -> Callable[[Callable[_P, _R]], _TaskDecorator[_P, _R]]: ...
    def branch_virtualenv(
        self, python_callable: Callable[..., Any] | None = None, **kwargs: Any
    ) -> Any:
        """``@task.virtualenv`` whose function returns the task id(s) to follow, as
        ``@task.branch``'s does; the other direct downstream tasks are skipped."""
        return _make(_BranchVirtualenvDecoratedOperator, python_callable, kwargs)

    @overload
    def external_python(
        self, python: str | None = None, *, python_callable: Callable[_P, _R], **kwargs: Any
    ) -> _TaskDecorator[_P, _R]: ...
    @overload
    def external_python(
        self, python: str | None = None, python_callable: None = None, **kwargs: Any
    ) -> Callable[[Callable[_P, _R]], _TaskDecorator[_P, _R]]: ...
    def external_python(
        self,
        python: str | None = None,
        python_callable: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """The function runs in the existing interpreter ``python`` (an absolute path;
        ``ExternalPythonOperator``'s arguments), its source in a subprocess."""
        return _make(
            _ExternalPythonDecoratedOperator, python_callable, {"python": python, **kwargs}
        )

    @overload
    def branch_external_python(
        self, python: str | None = None, *, python_callable: Callable[_P, _R], **kwargs: Any
    ) -> _TaskDecorator[_P, _R]: ...
    @overload
    def branch_external_python(
        self, python: str | None = None, python_callable: None = None, **kwargs: Any
    ) -> Callable[[Callable[_P, _R]], _TaskDecorator[_P, _R]]: ...
    def branch_external_python(
        self,
        python: str | None = None,
        python_callable: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """``@task.external_python`` whose function returns the task id(s) to follow, as
        ``@task.branch``'s does; the other direct downstream tasks are skipped."""
        return _make(
            _BranchExternalPythonDecoratedOperator, python_callable, {"python": python, **kwargs}
        )

    def __getattr__(self, name: str) -> Any:
        from tailrace.sdk._callbacks import REFUSED_NAMES, refused_name

        if f"task.{name}" in REFUSED_NAMES:
            refused_name(f"task.{name}")
        raise AttributeError(f"task has no decorator {name!r}")


task = TaskDecoratorCollection()
