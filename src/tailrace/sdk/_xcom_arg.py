"""References to task outputs (XComs) that are resolved when the consuming task runs.

Besides a whole value, an XComArg can give one *item* at an index: that is how an
``.iterate()`` instance fetches its own item from an upstream stream without reading the
rest. The combinators (``map``, ``filter``, ``zip``, ``concat``, ``batched``) work both
ways and never need to know a length up front; the scheduler sees only their shape
(:meth:`XComArg.stream_spec`), never the callables.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

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

    def filter(self, f: Callable[[Any], Any]) -> XComArg:
        """Only the items for which ``f(item)`` is true.

        Under ``.iterate()`` a filtered-out item keeps its place: its mapped instance is
        created and finishes *skipped* without running the operator, because the
        scheduler never runs ``f``.
        """
        return FilterXComArg(self, f)

    def zip(self, *others: XComArg | Sequence[Any]) -> XComArg:
        """Items paired by index, ``(a[i], b[i], ...)``; ends with the shortest input."""
        return ZipXComArg([self, *others])

    def concat(self, *others: XComArg | Sequence[Any]) -> XComArg:
        """The items of this argument, then those of each of ``others``."""
        return ConcatXComArg([self, *others])

    def batched(self, n: int) -> XComArg:
        """Lists of ``n`` consecutive items (the last may be shorter)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"batched() needs a positive whole number, got {n!r}")
        return BatchedXComArg(self, n)

    def iter_references(self) -> Iterator[tuple[AbstractOperator, str]]:
        """``(operator, key)`` pairs this argument reads."""
        raise NotImplementedError

    def resolve(self, context: Context) -> Any:
        """Pull the value through ``context["ti"]``."""
        raise NotImplementedError

    def item(self, index: int, context: Context) -> Any:
        """Item ``index`` of the (possibly still growing) sequence; ``ABSENT`` if filtered."""
        raise NotImplementedError

    def length(self, context: Context) -> int:
        """How many items exist now (filtered-out items included: they keep their place)."""
        raise NotImplementedError

    def items(self, start: int, stop: int, context: Context) -> list[Any]:
        """Items ``start <= i < stop`` (fewer past the end); one read where possible."""
        found = []
        for i in range(start, stop):
            try:
                found.append(self.item(i, context))
            except IndexError:
                break
        return found

    def stream_spec(self) -> dict[str, Any]:
        """The shape of this argument as plain data, for the scheduler's item counting."""
        raise NotImplementedError

    def as_setup(self) -> XComArg:
        """Mark the task(s) behind this XComArg as setup tasks (Airflow's ``as_setup``)."""
        for operator, _ in self.iter_references():
            operator.as_setup()
        return self

    def as_teardown(
        self,
        *,
        setups: Any = None,
        on_failure_fail_dagrun: bool | None = None,
    ) -> XComArg:
        """Mark the task(s) behind this XComArg as teardown tasks (see
        :meth:`BaseOperator.as_teardown`)."""
        for operator, _ in self.iter_references():
            operator.as_teardown(setups=setups, on_failure_fail_dagrun=on_failure_fail_dagrun)
        return self

    def __enter__(self) -> XComArg:
        from tailrace.sdk._setup_teardown import enter_scope

        for operator, _ in self.iter_references():
            enter_scope(operator)
        return self

    def __exit__(self, *exc: object) -> None:
        from tailrace.sdk._setup_teardown import exit_scope

        for operator, _ in self.iter_references():
            exit_scope(operator)

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

    def item(self, index: int, context: Context) -> Any:
        if self.operator.is_mapped:
            # The output of instance ``index``; a skipped instance pushed none.
            return context["ti"].xcom_pull(
                task_ids=self.operator.task_id, key=self.key, map_indexes=index, default=ABSENT
            )
        return _container(self.resolve(context))[index]

    def items(self, start: int, stop: int, context: Context) -> list[Any]:
        if self.operator.is_mapped:
            return super().items(start, stop, context)
        return list(_container(self.resolve(context))[start:stop])  # clamps at the end

    def length(self, context: Context) -> int:
        if self.operator.is_mapped:  # its instances, skipped ones included
            return int(context["ti"].mapped_length(self.operator.task_id))
        return len(_container(self.resolve(context)))

    def stream_spec(self) -> dict[str, Any]:
        return {"op": "source", "task_id": self.operator.task_id, "key": self.key}


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


# The item a filter left out. It keeps its index, so lengths stay known without user code.
ABSENT: Final = _Absent()


def _container(value: Any) -> Any:
    """Something indexable with ``len``: a list, a lazy stream reader, or a dict's items."""
    if isinstance(value, Mapping):
        return list(value.items())
    indexable = hasattr(value, "__getitem__") and hasattr(value, "__len__")
    if indexable and not isinstance(value, str | bytes):
        return value
    raise TypeError(
        f"an iterated argument must be a list, a dict or a stream, got "
        f"{type(value).__name__}: {value!r:.200}"
    )


class LazyItems:
    """Items computed on demand from an upstream stream: iterate it, never held whole."""

    def __init__(self, produce: Callable[[], Iterator[Any]], what: str) -> None:
        self._produce = produce
        self._what = what

    def __iter__(self) -> Iterator[Any]:
        return self._produce()

    def __repr__(self) -> str:
        return f"<lazy {self._what}>"


def _is_lazy(value: Any) -> bool:
    return not isinstance(value, Sequence | Mapping)


def _iter_items(value: Any) -> Iterator[Any]:
    if isinstance(value, Mapping):
        return iter(value.items())
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(
            f"XComArg.map() and .expand() need a list or dict to iterate over, got "
            f"{type(value).__name__}: {value!r:.200}"
        )
    return iter(value)


def as_item_source(value: XComArg | Sequence[Any]) -> XComArg | LiteralArg:
    """A task output as it is, a plain list (or dict) wrapped to give items by index."""
    if isinstance(value, XComArg):
        return value
    if isinstance(value, Sequence | Mapping) and not isinstance(value, str | bytes):
        return LiteralArg(value)
    raise TypeError(
        f"zip(), concat() and iterate() take task outputs or lists, "
        f"got {type(value).__name__}: {value!r:.200}"
    )


class LiteralArg:
    """A plain list given where a stream may be: indexable, with a known length."""

    def __init__(self, value: Sequence[Any] | Mapping[Any, Any]) -> None:
        self.value = list(value.items()) if isinstance(value, Mapping) else list(value)

    def resolve(self, context: Context) -> Any:
        return self.value

    def item(self, index: int, context: Context) -> Any:
        return self.value[index]

    def items(self, start: int, stop: int, context: Context) -> list[Any]:
        return self.value[start:stop]

    def length(self, context: Context) -> int:
        return len(self.value)

    def iter_references(self) -> Iterator[tuple[AbstractOperator, str]]:
        return iter(())

    def stream_spec(self) -> dict[str, Any]:
        return {"op": "literal", "length": len(self.value)}


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

    @property
    def roots(self) -> list[AbstractOperator]:
        return self.arg.roots

    @property
    def leaves(self) -> list[AbstractOperator]:
        return self.arg.leaves

    def iter_references(self) -> Iterator[tuple[AbstractOperator, str]]:
        return self.arg.iter_references()

    def _apply(self, item: Any) -> Any:
        for f in self.callables:
            item = f(item)
        return item

    def resolve(self, context: Context) -> Any:
        value = self.arg.resolve(context)
        if _is_lazy(value):
            return LazyItems(lambda: map(self._apply, _iter_items(value)), repr(self))
        return [self._apply(item) for item in _items(value)]

    def item(self, index: int, context: Context) -> Any:
        item = self.arg.item(index, context)
        return item if item is ABSENT else self._apply(item)

    def items(self, start: int, stop: int, context: Context) -> list[Any]:
        return [i if i is ABSENT else self._apply(i) for i in self.arg.items(start, stop, context)]

    def length(self, context: Context) -> int:
        return self.arg.length(context)

    def stream_spec(self) -> dict[str, Any]:
        return {"op": "map", "args": [self.arg.stream_spec()]}


def _name(f: Callable[..., Any]) -> str:
    return getattr(f, "__name__", "?")


class _Combined(XComArg):
    """A combinator over one or more arguments; it runs downstream of all of them."""

    op: str
    args: list[Any]

    def __init__(self, args: Sequence[XComArg | Sequence[Any]]) -> None:
        self.args = [as_item_source(a) for a in args]
        first = next((a for a in self.args if isinstance(a, XComArg)), None)
        if first is None:
            raise TypeError(f"{self.op}() needs at least one task output")
        self.operator = first.operator
        self.key = first.key

    @property
    def roots(self) -> list[AbstractOperator]:
        return [a.operator for a in self.args if isinstance(a, XComArg)]

    leaves = roots

    def __repr__(self) -> str:
        return f"{self.op}({', '.join(repr(a) for a in self.args)})"

    def iter_references(self) -> Iterator[tuple[AbstractOperator, str]]:
        for a in self.args:
            yield from a.iter_references()

    def set_upstream(self, other: Any) -> None:
        for op in self.roots:
            op.set_upstream(other)

    def set_downstream(self, other: Any) -> None:
        for op in self.roots:
            op.set_downstream(other)

    def stream_spec(self) -> dict[str, Any]:
        return {"op": self.op, "args": [a.stream_spec() for a in self.args]}


class FilterXComArg(_Combined):
    op = "filter"

    def __init__(self, arg: XComArg, f: Callable[[Any], Any]) -> None:
        super().__init__([arg])
        self.f = f

    def __repr__(self) -> str:
        return f"{self.args[0]!r}.filter({_name(self.f)})"

    def _keep(self, item: Any) -> Any:
        return item if item is not ABSENT and self.f(item) else ABSENT

    def resolve(self, context: Context) -> Any:
        value = self.args[0].resolve(context)
        if _is_lazy(value):
            return LazyItems(lambda: filter(self.f, _iter_items(value)), repr(self))
        return [item for item in _items(value) if self.f(item)]

    def item(self, index: int, context: Context) -> Any:
        return self._keep(self.args[0].item(index, context))

    def items(self, start: int, stop: int, context: Context) -> list[Any]:
        return [self._keep(i) for i in self.args[0].items(start, stop, context)]

    def length(self, context: Context) -> int:
        return int(self.args[0].length(context))


class ZipXComArg(_Combined):
    op = "zip"

    def resolve(self, context: Context) -> Any:
        values = [a.resolve(context) for a in self.args]
        if any(_is_lazy(v) for v in values):
            return LazyItems(
                lambda: zip(*(_iter_items(v) for v in values), strict=False), repr(self)
            )
        return [tuple(t) for t in zip(*(_items(v) for v in values), strict=False)]

    def item(self, index: int, context: Context) -> Any:
        parts = tuple(a.item(index, context) for a in self.args)
        return ABSENT if any(p is ABSENT for p in parts) else parts

    def length(self, context: Context) -> int:
        return min(int(a.length(context)) for a in self.args)


class ConcatXComArg(_Combined):
    op = "concat"

    def resolve(self, context: Context) -> Any:
        values = [a.resolve(context) for a in self.args]
        if any(_is_lazy(v) for v in values):
            return LazyItems(
                lambda: itertools.chain.from_iterable(_iter_items(v) for v in values), repr(self)
            )
        return [item for v in values for item in _items(v)]

    def item(self, index: int, context: Context) -> Any:
        for a in self.args[:-1]:
            # The scheduler creates instance ``index`` past an input only once it closed.
            n = int(a.length(context))
            if index < n:
                return a.item(index, context)
            index -= n
        return self.args[-1].item(index, context)

    def length(self, context: Context) -> int:
        return sum(int(a.length(context)) for a in self.args)


class BatchedXComArg(_Combined):
    op = "batched"

    def __init__(self, arg: XComArg, n: int) -> None:
        super().__init__([arg])
        self.n = n

    def __repr__(self) -> str:
        return f"{self.args[0]!r}.batched({self.n})"

    def _batches(self, items: Iterable[Any]) -> Iterator[list[Any]]:
        it = iter(items)
        while batch := list(itertools.islice(it, self.n)):
            yield batch

    def resolve(self, context: Context) -> Any:
        value = self.args[0].resolve(context)
        if _is_lazy(value):
            return LazyItems(lambda: self._batches(_iter_items(value)), repr(self))
        return list(self._batches(_items(value)))

    def item(self, index: int, context: Context) -> Any:
        start = index * self.n
        # Past the end of a (closed) mapped source the items are ABSENT; a stream's last
        # batch stops at its length.
        batch = [i for i in self.args[0].items(start, start + self.n, context) if i is not ABSENT]
        return batch if batch else ABSENT

    def length(self, context: Context) -> int:
        return -(-int(self.args[0].length(context)) // self.n)

    def stream_spec(self) -> dict[str, Any]:
        return {"op": "batched", "n": self.n, "args": [self.args[0].stream_spec()]}


def expand_items(value: Any) -> Any:
    """The items a mapped argument iterates over, indexable with a length: a list, a dict's
    ``(key, value)`` pairs, or an upstream's (closed) stream, read an item at a time."""
    if isinstance(value, Sequence | Mapping | str | bytes):
        return _items(value)
    try:
        return _container(value)
    except TypeError:
        return _items(value)  # its message names .map() and .expand()
