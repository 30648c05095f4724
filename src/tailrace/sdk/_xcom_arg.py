"""References to task outputs (XComs) that are resolved when the consuming task runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tailrace.sdk._node import AbstractOperator, DependencyMixin
from tailrace.sdk._types import XCOM_RETURN_KEY

if TYPE_CHECKING:
    from tailrace.sdk._context import Context


class XComArg(DependencyMixin):
    """A reference to an XCom of an upstream task, resolved at run time.

    Get one from ``task.output``, by calling a ``@task`` function, or with
    ``xcom_arg["key"]``. Passing it to another task's arguments makes that task run
    downstream and receive the value. ``>>`` works on XComArgs like on tasks.
    """

    operator: AbstractOperator
    key: str

    @property
    def roots(self) -> list[AbstractOperator]:
        return [self.operator]

    @property
    def leaves(self) -> list[AbstractOperator]:
        return [self.operator]

    def __getitem__(self, key: str) -> XComArg:
        """A reference to the XCom pushed under ``key`` by the same task."""
        return PlainXComArg(self.operator, key)

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(
            "An XComArg is not iterable while the DAG is defined: its value exists only when "
            "the task runs. Use .expand() or .map() to work with each item."
        )

    def map(self, f: Callable[[Any], Any]) -> XComArg:
        """A lazily transformed reference: ``f`` is applied to each item when resolved."""
        return MapXComArg(self, [f])

    def iter_references(self) -> Iterator[tuple[AbstractOperator, str]]:
        """``(operator, key)`` pairs this argument reads."""
        raise NotImplementedError

    def resolve(self, context: Context) -> Any:
        """Pull the value through ``context["ti"]``."""
        raise NotImplementedError

    def set_upstream(self, other: Any) -> None:
        self.operator.set_upstream(other)

    def set_downstream(self, other: Any) -> None:
        self.operator.set_downstream(other)


class PlainXComArg(XComArg):
    """The XCom ``key`` (default the return value) of ``operator``."""

    def __init__(self, operator: AbstractOperator, key: str = XCOM_RETURN_KEY) -> None:
        self.operator = operator
        self.key = key

    def __repr__(self) -> str:
        if self.key == XCOM_RETURN_KEY:
            return f"XComArg({self.operator!r})"
        return f"XComArg({self.operator!r}, {self.key!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlainXComArg):
            return NotImplemented
        return self.operator is other.operator and self.key == other.key

    def __hash__(self) -> int:
        return hash((id(self.operator), self.key))

    def iter_references(self) -> Iterator[tuple[AbstractOperator, str]]:
        yield self.operator, self.key

    def resolve(self, context: Context) -> Any:
        return context["ti"].xcom_pull(task_ids=self.operator.task_id, key=self.key)


def _items(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(
        f"XComArg.map() and .expand() need a list or dict to iterate over, got "
        f"{type(value).__name__}: {value!r}"
    )


class MapXComArg(XComArg):
    """``arg.map(f)``: each item of the upstream list (or ``(key, value)`` of a dict) run
    through the callables, applied when resolved."""

    def __init__(self, arg: XComArg, callables: Sequence[Callable[[Any], Any]]) -> None:
        self.arg = arg
        self.callables = list(callables)
        self.operator = arg.operator
        self.key = arg.key

    def __repr__(self) -> str:
        return f"{self.arg!r}.map({', '.join(getattr(f, '__name__', '?') for f in self.callables)})"

    def map(self, f: Callable[[Any], Any]) -> XComArg:
        return MapXComArg(self.arg, [*self.callables, f])

    def iter_references(self) -> Iterator[tuple[AbstractOperator, str]]:
        return self.arg.iter_references()

    def resolve(self, context: Context) -> Any:
        result = []
        for item in _items(self.arg.resolve(context)):
            for f in self.callables:
                item = f(item)
            result.append(item)
        return result


def expand_items(value: Any) -> list[Any]:
    """The items a mapped argument iterates over: list items, or dict ``(key, value)`` pairs."""
    return _items(value)
