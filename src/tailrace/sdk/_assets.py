"""Assets: the data tasks update, and schedules that wait for those updates (Airflow 3).

A task with ``outlets=[asset]`` emits an *asset event* each time it succeeds; a DAG with
``schedule=asset`` (or a list, or an ``&``/``|`` condition of assets) runs when the events
it waits for have arrived. Nothing here touches a database: the runtime stores events and
the scheduler evaluates conditions on serialized DAGs.
"""

from __future__ import annotations

import inspect
import string
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, overload

from tailrace.sdk.errors import DagDefinitionError, InvalidAssetError

if TYPE_CHECKING:
    from tailrace.sdk._dag import DAG
    from tailrace.sdk.triggers import BaseEventTrigger

__all__ = [
    "Asset",
    "AssetAlias",
    "AssetAll",
    "AssetAny",
    "AssetEvent",
    "AssetRef",
    "AssetWatcher",
    "BaseAsset",
    "asset",
]

_MAX_LENGTH = 1500
_RESERVED_SCHEMES = ("airflow", "tailrace")
_SCHEME_CHARS = frozenset(string.ascii_letters + string.digits + "+-.")


def _check_identifier(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidAssetError(what=what, value=value, reason="it must be a string")
    if not value or value.isspace():
        raise InvalidAssetError(what=what, value=value, reason="it is empty")
    if len(value) > _MAX_LENGTH:
        raise InvalidAssetError(
            what=what, value=value, reason=f"it is longer than {_MAX_LENGTH} characters"
        )
    if not value.isascii():
        raise InvalidAssetError(what=what, value=value, reason="it has non-ASCII characters")
    return value


def check_uri(uri: object) -> str:
    """Return ``uri`` if it can name an asset, else raise :class:`InvalidAssetError`.

    As in Airflow: ASCII, at most 1500 characters; a URI with a scheme may not use a
    reserved scheme (``airflow``, ``tailrace``) nor carry credentials (``user:pw@``),
    and needs a location after the scheme. A plain string without a scheme is accepted.
    """
    text = _check_identifier(uri, "uri")
    if any(c.isspace() for c in text):
        raise InvalidAssetError(what="uri", value=uri, reason="it contains whitespace")
    scheme, sep, rest = text.partition(":")
    if not sep or not scheme or not set(scheme) <= _SCHEME_CHARS or not scheme[0].isalpha():
        return text  # not a URI with a scheme: a plain identifier, as Airflow allows
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError as exc:
        raise InvalidAssetError(what="uri", value=uri, reason=str(exc)) from None
    if parts.scheme.lower() in _RESERVED_SCHEMES:
        raise InvalidAssetError(
            what="uri", value=uri, reason=f"the scheme {parts.scheme!r} is reserved"
        )
    if "@" in parts.netloc:
        raise InvalidAssetError(
            what="uri",
            value=uri,
            reason="it contains credentials (user or password); an asset URI is shown "
            "everywhere, keep secrets in connections",
        )
    if not rest.strip("/"):
        raise InvalidAssetError(what="uri", value=uri, reason="it has nothing after the scheme")
    return text


class BaseAsset:
    """What a schedule may be made of: assets, aliases, references and their conditions."""

    def __and__(self, other: BaseAsset) -> AssetAll:
        _check_operand(other, "&")
        return AssetAll(self, other)

    def __or__(self, other: BaseAsset) -> AssetAny:
        _check_operand(other, "|")
        return AssetAny(self, other)

    def iter_leaves(self) -> Iterator[BaseAsset]:
        """The assets, aliases and references this condition is made of."""
        yield self


def _check_operand(other: object, op: str) -> None:
    if not isinstance(other, BaseAsset):
        raise TypeError(
            f"an asset condition combines assets, aliases and conditions with {op}; got {other!r}"
        )


class AssetWatcher:
    """Turns what ``trigger`` yields into events of the asset it watches.

    Each event the trigger yields becomes an asset event, its payload the event's
    ``extra``, and schedules the DAGs waiting for the asset. The trigger runs in the
    triggerer like any other (leases, failover); watchers whose triggers have the same
    class and arguments share one trigger run.
    """

    def __init__(self, name: str, trigger: BaseEventTrigger) -> None:
        from tailrace.sdk.triggers import BaseEventTrigger, check_trigger_kwargs

        self.name = _check_identifier(name, "watcher name")
        if not isinstance(trigger, BaseEventTrigger):
            raise TypeError(
                f"AssetWatcher {name!r}: {type(trigger).__name__} is not a BaseEventTrigger; "
                "only triggers meant to watch for events (subclasses of BaseEventTrigger, as "
                "in Airflow) can start runs"
            )
        _, kwargs = trigger.serialize()
        check_trigger_kwargs(kwargs, dag_id=None, task_id=None, what=f"asset watcher {name!r}")
        self.trigger = trigger

    def __repr__(self) -> str:
        return f"AssetWatcher({self.name!r}, {self.trigger!r})"


class Asset(BaseAsset):
    """A piece of data, by ``name`` and ``uri`` (either defaults to the other).

    ``Asset("s3://bucket/orders.csv")`` is named by its URI. ``group`` sorts assets in
    listings; ``extra`` is free JSON metadata. Equal name and URI mean the same asset.
    ``watchers`` are :class:`AssetWatcher` s whose triggers emit this asset's events from
    outside (a message queue, say).
    """

    def __init__(
        self,
        name: str | None = None,
        uri: str | None = None,
        *,
        group: str = "asset",
        extra: Mapping[str, Any] | None = None,
        watchers: Sequence[AssetWatcher] | None = None,
    ) -> None:
        if name is None and uri is None:
            raise InvalidAssetError(what="name", value=None, reason="give a name or a uri")
        self.uri = check_uri(uri if uri is not None else name)
        self.name = _check_identifier(name if name is not None else uri, "name")
        self.group = _check_identifier(group, "group")
        self.extra: dict[str, Any] = dict(extra or {})
        from tailrace.sdk.triggers import check_trigger_kwargs

        check_trigger_kwargs(self.extra, dag_id=None, task_id=None, what="asset", name="extra")
        self.watchers: list[AssetWatcher] = list(watchers or [])
        bad = [w for w in self.watchers if not isinstance(w, AssetWatcher)]
        if bad:
            raise TypeError(f"Asset {self.name!r}: watchers must be AssetWatchers, got {bad!r}")

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.uri)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Asset) and other.key == self.key

    def __hash__(self) -> int:
        return hash(("asset", *self.key))

    def __repr__(self) -> str:
        if self.name == self.uri:
            return f"Asset({self.uri!r})"
        return f"Asset(name={self.name!r}, uri={self.uri!r})"

    @staticmethod
    def ref(*, name: str | None = None, uri: str | None = None) -> AssetRef:
        """An asset defined elsewhere, by name or URI (one of them)."""
        return AssetRef(name=name, uri=uri)


class AssetRef(BaseAsset):
    """An asset defined in another DAG file, named by ``name`` or ``uri``; an unknown
    one is an import error naming it."""

    def __init__(self, *, name: str | None = None, uri: str | None = None) -> None:
        if (name is None) == (uri is None):
            raise TypeError("Asset.ref() takes exactly one of name= and uri=")
        self.name = _check_identifier(name, "name") if name is not None else None
        self.uri = check_uri(uri) if uri is not None else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AssetRef) and (other.name, other.uri) == (self.name, self.uri)

    def __hash__(self) -> int:
        return hash(("ref", self.name, self.uri))

    def __repr__(self) -> str:
        return f"Asset.ref(name={self.name!r})" if self.name else f"Asset.ref(uri={self.uri!r})"


class AssetAlias(BaseAsset):
    """A name for assets a task decides at run time: the task emits events for the alias
    with ``outlet_events[alias].add(Asset(...))``; a DAG scheduled on the alias runs on
    events of the assets it resolved to."""

    def __init__(self, name: str, *, group: str = "asset") -> None:
        self.name = _check_identifier(name, "alias name")
        self.group = _check_identifier(group, "group")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AssetAlias) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("alias", self.name))

    def __repr__(self) -> str:
        return f"AssetAlias({self.name!r})"


class _Condition(BaseAsset):
    op: str

    def __init__(self, *objects: BaseAsset) -> None:
        for obj in objects:
            _check_operand(obj, self.op)
        flat: list[BaseAsset] = []
        for obj in objects:  # (a & b) & c is all of a, b, c
            flat.extend(obj.objects if isinstance(obj, type(self)) else [obj])
        self.objects: list[BaseAsset] = flat

    def iter_leaves(self) -> Iterator[BaseAsset]:
        for obj in self.objects:
            yield from obj.iter_leaves()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self)) and other.objects == self.objects

    def __hash__(self) -> int:
        return hash((self.op, *self.objects))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.objects))})"


class AssetAll(_Condition):
    """Every one of the assets or conditions (``a & b``; a list schedule means this)."""

    op = "&"


class AssetAny(_Condition):
    """Any one of the assets or conditions (``a | b``)."""

    op = "|"


def as_condition(schedule: object, *, dag_id: str) -> BaseAsset | None:
    """``schedule`` as an asset condition, or None if it is not an asset schedule.

    A list (or tuple) of assets means all of them, as in Airflow; an empty one, or one
    holding something other than assets, is an error naming the DAG and the value.
    """
    from tailrace.sdk.errors import InvalidScheduleError

    if isinstance(schedule, BaseAsset):
        return schedule
    if isinstance(schedule, list | tuple):
        if not schedule:
            raise InvalidScheduleError(
                dag_id=dag_id, schedule=schedule, reason="an empty list waits for nothing"
            )
        bad = [s for s in schedule if not isinstance(s, BaseAsset)]
        if bad:
            raise InvalidScheduleError(
                dag_id=dag_id,
                schedule=schedule,
                reason=f"a list schedule holds assets only, not {bad[0]!r}",
            )
        return schedule[0] if len(schedule) == 1 else AssetAll(*schedule)
    return None


# -- at run time -----------------------------------------------------------------------


@dataclass(frozen=True)
class AssetEvent:
    """One update of an asset, as a task's ``inlet_events`` (or
    ``triggering_asset_events``) gives it."""

    id: int
    asset: Asset
    extra: dict[str, Any]
    timestamp: datetime
    source_dag_id: str | None = None
    source_task_id: str | None = None
    source_run_id: str | None = None
    source_map_index: int = -1
    source_alias_name: str | None = None


@dataclass
class OutletEventAccessor:
    """What a task sets on the event its success emits for ``key``: its ``extra``; for an
    alias, the assets it resolves to (``add``)."""

    key: Asset | AssetAlias
    extra: dict[str, Any] = field(default_factory=dict)
    added: list[tuple[Asset, dict[str, Any]]] = field(default_factory=list)

    def add(self, asset: Asset, extra: Mapping[str, Any] | None = None) -> None:
        """An event of ``asset`` through this alias (only for an alias)."""
        if not isinstance(self.key, AssetAlias):
            raise TypeError(
                f"outlet_events[{self.key!r}].add(): only an AssetAlias adds assets; set "
                f".extra for an asset's own event"
            )
        if not isinstance(asset, Asset):
            raise TypeError(f"outlet_events[{self.key!r}].add() takes an Asset, got {asset!r}")
        self.added.append((asset, dict(extra or {})))


class OutletEventAccessors(Mapping[Any, OutletEventAccessor]):
    """``context["outlet_events"]``: the events this task emits when it succeeds, one per
    outlet, keyed by the outlet (an :class:`Asset` or :class:`AssetAlias`)."""

    def __init__(self, outlets: Sequence[Asset | AssetAlias], task_id: str) -> None:
        self._task_id = task_id
        self._accessors = {o: OutletEventAccessor(o) for o in outlets}

    def __getitem__(self, key: Any) -> OutletEventAccessor:
        try:
            return self._accessors[key]
        except KeyError:
            raise KeyError(
                f"{key!r} is not an outlet of task {self._task_id!r}; add it to the task's "
                "outlets= to emit its events"
            ) from None

    def __iter__(self) -> Iterator[Any]:
        return iter(self._accessors)

    def __len__(self) -> int:
        return len(self._accessors)


# (asset name, alias name, offset, limit) -> (total, events in time order)
EventFetcher = Callable[[str | None, str | None, int, int], tuple[int, list[AssetEvent]]]


class InletEvents(Sequence[AssetEvent]):
    """The events of one inlet, oldest first, read from the owner as they are indexed."""

    def __init__(self, fetch: EventFetcher, name: str | None, alias: str | None) -> None:
        self._fetch = fetch
        self._name = name
        self._alias = alias
        self._total: int | None = None

    def __len__(self) -> int:
        if self._total is None:
            self._total, _ = self._fetch(self._name, self._alias, 0, 0)
        return self._total

    @overload
    def __getitem__(self, index: int) -> AssetEvent: ...
    @overload
    def __getitem__(self, index: slice) -> list[AssetEvent]: ...

    def __getitem__(self, index: int | slice) -> AssetEvent | list[AssetEvent]:
        total = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(total)
            if stop <= start:
                return []
            _, events = self._fetch(self._name, self._alias, start, stop - start)
            return events[::step]
        if not -total <= index < total:
            raise IndexError(f"inlet event index {index} out of range ({total} events)")
        _, events = self._fetch(self._name, self._alias, index % total, 1)
        return events[0]

    def __iter__(self) -> Iterator[AssetEvent]:
        start, page = 0, 500
        while True:
            _, events = self._fetch(self._name, self._alias, start, page)
            yield from events
            if len(events) < page:
                return
            start += page


class InletEventsAccessors(Mapping[Any, InletEvents]):
    """``context["inlet_events"]``: for each inlet of the task, its events (oldest first):
    ``inlet_events[asset][-1].extra`` is the latest event's extra."""

    def __init__(self, inlets: Sequence[BaseAsset], task_id: str, fetch: EventFetcher) -> None:
        self._task_id = task_id
        self._inlets = list(inlets)
        self._fetch = fetch

    def __getitem__(self, key: Any) -> InletEvents:
        if key not in self._inlets:
            raise KeyError(
                f"{key!r} is not an inlet of task {self._task_id!r}; add it to the task's "
                "inlets= to read its events"
            )
        if isinstance(key, AssetAlias):
            return InletEvents(self._fetch, None, key.name)
        if isinstance(key, AssetRef) and key.name is None:
            raise KeyError(f"{key!r}: an inlet reference by URI is read by name; use name=")
        return InletEvents(self._fetch, key.name, None)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._inlets)

    def __len__(self) -> int:
        return len(self._inlets)


def check_outlets(value: object, *, dag_id: str | None, task_id: str) -> list[Asset | AssetAlias]:
    """``outlets=`` as a list of assets and aliases, or an error naming the task."""
    items = _as_list(value)
    for item in items:
        if not isinstance(item, Asset | AssetAlias):
            raise DagDefinitionError(
                f"outlets of task '{task_id}' hold assets and aliases, not {item!r}",
                dag_id=dag_id,
                task_id=task_id,
                field="outlets",
                hint="Pass Asset(...) or AssetAlias(...) objects (Asset.ref() is for "
                "schedules and inlets).",
            )
    return items


def check_inlets(value: object, *, dag_id: str | None, task_id: str) -> list[BaseAsset]:
    items = _as_list(value)
    for item in items:
        if not isinstance(item, Asset | AssetAlias | AssetRef):
            raise DagDefinitionError(
                f"inlets of task '{task_id}' hold assets, aliases and Asset.ref()s, not {item!r}",
                dag_id=dag_id,
                task_id=task_id,
                field="inlets",
            )
    return items


def _as_list(value: object) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


# -- @asset ----------------------------------------------------------------------------


class AssetDefinition(Asset):
    """An asset made by a function: ``@asset`` builds it, and a DAG of the same name
    whose one task runs the function and emits the asset's event when it succeeds."""

    dag: DAG


def asset(
    *,
    schedule: Any,
    uri: str | None = None,
    name: str | None = None,
    group: str = "asset",
    extra: Mapping[str, Any] | None = None,
    watchers: Sequence[AssetWatcher] | None = None,
    **dag_kwargs: Any,
) -> Callable[[Callable[..., Any]], AssetDefinition]:
    """Decorate a function that materialises an asset (Airflow 3's ``@asset``)::

        @asset(schedule="@daily", uri="s3://bucket/orders.parquet")
        def orders():
            ...

    The result is an :class:`Asset` (named after the function unless ``name=``), usable in
    other schedules, and a DAG with that id and one task of that id whose success emits
    the asset's event. The function may take ``self`` (the asset) and ``context``;
    other parameters are refused. ``dag_kwargs`` are the DAG's other arguments.
    """

    def decorator(f: Callable[..., Any]) -> AssetDefinition:
        from tailrace.sdk._dag import DAG
        from tailrace.sdk.operators.python import PythonOperator

        asset_name = name or f.__name__
        definition = AssetDefinition(
            name=asset_name, uri=uri, group=group, extra=extra, watchers=watchers
        )
        params = inspect.signature(f).parameters
        unknown = [p for p in params if p not in ("self", "context")]
        if unknown:
            raise DagDefinitionError(
                f"@asset function {f.__name__}() takes {unknown[0]!r}, which Tailrace cannot fill",
                dag_id=asset_name,
                task_id=asset_name,
                field=unknown[0],
                hint="Take self and context only; read other assets with inlets= and "
                "context['inlet_events'].",
            )

        def run(**context: Any) -> Any:
            kwargs: dict[str, Any] = {}
            if "self" in params:
                kwargs["self"] = definition
            if "context" in params:
                kwargs["context"] = context
            return f(**kwargs)

        run.__name__ = f.__name__
        run.__doc__ = f.__doc__
        kwargs = dict(dag_kwargs)
        kwargs.setdefault("fileloc", inspect.getsourcefile(f) or "")
        if f.__doc__ and "doc_md" not in kwargs:
            kwargs["doc_md"] = inspect.cleandoc(f.__doc__)
        with DAG(asset_name, schedule=schedule, **kwargs) as the_dag:
            PythonOperator(task_id=asset_name, python_callable=run, outlets=[definition])
        definition.dag = the_dag
        return definition

    return decorator


def describe_condition(condition: BaseAsset, *, top: bool = True) -> str:
    """``orders & (prices | rates)``: a condition as one line, by asset name."""
    if isinstance(condition, _Condition):
        text = f" {condition.op} ".join(describe_condition(c, top=False) for c in condition.objects)
        return text if top else f"({text})"
    if isinstance(condition, AssetAlias):
        return f"alias:{condition.name}"
    if isinstance(condition, AssetRef):
        return condition.name or condition.uri or ""
    assert isinstance(condition, Asset)
    return condition.name


class TriggeringAssetEvents(Mapping[Asset, list[AssetEvent]]):
    """``context["triggering_asset_events"]``: the events that started this run, by
    asset (empty for a run that assets did not trigger). Read once, when first used."""

    def __init__(self, fetch: Callable[[], list[AssetEvent]]) -> None:
        self._fetch = fetch
        self._events: dict[Asset, list[AssetEvent]] | None = None

    def _load(self) -> dict[Asset, list[AssetEvent]]:
        if self._events is None:
            self._events = {}
            for event in self._fetch():
                self._events.setdefault(event.asset, []).append(event)
        return self._events

    def __getitem__(self, key: Asset) -> list[AssetEvent]:
        return self._load()[key]

    def __iter__(self) -> Iterator[Asset]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())
