"""Asset rows: assets and aliases a parse names, the events that update them, and the
queue of events each asset-scheduled DAG has yet to run for.

An event is written in the transaction of what caused it — a task's success (the
`finish` transition), a watcher's trigger event (the triggerer), an external ``POST``
(the API) — and so is its fan-out: a queue row for every active, unpaused DAG scheduled
on the asset (directly, or through an alias the asset resolved to). The scheduler turns
a DAG's queue into a run when the DAG's condition holds.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import Connection, delete, insert, select, union_all, update

from tailrace.db.models import (
    Asset,
    AssetAlias,
    AssetAliasAsset,
    AssetDagRunQueue,
    AssetEvent,
    AssetReference,
    AssetWatcher,
    Dag,
    Trigger,
)
from tailrace.errors import TailraceError
from tailrace.serialization import AssetCondition, SerializedAsset, SerializedDag, dumps
from tailrace.store.triggers import complete_triggers, create_trigger

log = logging.getLogger(__name__)

__all__ = [
    "WATCHER_CONSUMER",
    "AssetConflictError",
    "NewAssetEvent",
    "prune_watchers",
    "record_events",
    "record_watcher_events",
    "resolve_ref",
    "sync_dag_assets",
    "sync_dag_references",
]


class AssetConflictError(TailraceError):
    """Two definitions of one asset disagree (a name with two URIs, or the reverse)."""

    def __init__(self, *, dag_id: str, name: str, uri: str, other_name: str, other_uri: str):
        self.dag_id = dag_id
        super().__init__(
            f"DAG '{dag_id}' defines Asset(name={name!r}, uri={uri!r}), but an asset "
            f"Asset(name={other_name!r}, uri={other_uri!r}) already exists",
            hint="An asset's name and URI each identify it: give every definition the "
            "same name and URI.",
        )


class NewAssetEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event to record. The asset is named by ``name`` (and ``uri``, to create an
    asset an alias resolved to at run time)."""

    name: str
    uri: str | None = None
    group: str = "asset"
    extra: dict[str, Any] = msgspec.field(default_factory=dict)
    source_dag_id: str | None = None
    source_task_id: str | None = None
    source_run_id: str | None = None
    source_map_index: int = -1
    source_alias_name: str | None = None
    source_trigger_id: int | None = None
    # A redelivery of the same message (or a client's retry) is recorded once.
    dedup_key: str | None = None


# -- at parse time -----------------------------------------------------------------------


def _upsert_asset(
    conn: Connection, dag_id: str, name: str, uri: str, group: str, extra: Any, now: datetime
) -> int:
    """The asset's id, inserting it, or updating the stored one of this name (a
    definition may give it a new URI) or, failing that, of this URI."""
    by_name = conn.execute(select(Asset.id, Asset.uri).where(Asset.name == name)).first()
    other = conn.execute(select(Asset.id, Asset.name).where(Asset.uri == uri)).first()
    if other is not None and (by_name is None or other.id != by_name.id) and by_name:
        raise AssetConflictError(
            dag_id=dag_id, name=name, uri=uri, other_name=other.name, other_uri=uri
        )
    found = by_name.id if by_name is not None else (other.id if other is not None else None)
    if found is not None:
        conn.execute(
            update(Asset)
            .where(Asset.id == found)
            .values(name=name, uri=uri, group=group, extra=extra, updated_at=now)
        )
        return int(found)
    return int(
        conn.execute(
            insert(Asset)
            .values(name=name, uri=uri, group=group, extra=extra, created_at=now, updated_at=now)
            .returning(Asset.id)
        ).scalar_one()
    )


def _alias_id(conn: Connection, name: str, group: str = "asset") -> int:
    found = conn.scalar(select(AssetAlias.id).where(AssetAlias.name == name))
    if found is not None:
        return int(found)
    return int(
        conn.execute(
            insert(AssetAlias).values(name=name, group=group).returning(AssetAlias.id)
        ).scalar_one()
    )


def resolve_ref(conn: Connection, leaf: AssetCondition) -> int | None:
    """The id of the asset a leaf names (an asset or a reference), if it exists."""
    if leaf.kind == "ref" and leaf.name is None:
        return conn.scalar(select(Asset.id).where(Asset.uri == leaf.uri))
    return conn.scalar(select(Asset.id).where(Asset.name == leaf.name))


def sync_dag_assets(conn: Connection, dag_id: str, dag: SerializedDag, now: datetime) -> bool:
    """Record the assets and aliases a DAG version names, and how it names them; returns
    whether a reference (``Asset.ref``) named an asset not stored yet (one another file
    of the same parse defines: call :func:`sync_dag_references` again after those).

    Raises :class:`AssetConflictError` for an asset whose name or URI another asset has.
    """
    ids = {
        a.name: _upsert_asset(conn, dag_id, a.name, a.uri, a.group, a.extra, now)
        for a in dag.assets
    }
    for a in dag.assets:
        if a.watchers:
            _sync_watchers(conn, dag_id, ids[a.name], a, now)
        else:  # this DAG's definition has none (any more)
            conn.execute(
                delete(AssetWatcher).where(
                    AssetWatcher.asset_id == ids[a.name], AssetWatcher.dag_id == dag_id
                )
            )
    return sync_dag_references(conn, dag_id, dag)


def sync_dag_references(conn: Connection, dag_id: str, dag: SerializedDag) -> bool:
    """Rewrite which assets and aliases the DAG names, and how; returns whether a
    reference named an asset not stored (yet)."""
    alias_ids = {a.name: _alias_id(conn, a.name, a.group) for a in dag.aliases}
    conn.execute(delete(AssetReference).where(AssetReference.dag_id == dag_id))
    refs: list[dict[str, Any]] = []
    unresolved = False

    def add(kind: str, task_id: str | None, leaves: Iterable[AssetCondition]) -> None:
        nonlocal unresolved
        for leaf in leaves:
            row: dict[str, Any] = {"dag_id": dag_id, "kind": kind, "task_id": task_id}
            if leaf.kind == "alias":
                row.update(asset_id=None, alias_id=alias_ids[leaf.name or ""])
            else:
                row.update(asset_id=resolve_ref(conn, leaf), alias_id=None)
                unresolved |= row["asset_id"] is None
            if row["asset_id"] is not None or row["alias_id"] is not None:
                refs.append(row)

    if dag.schedule.condition is not None:
        add("schedule", None, dag.schedule.condition.leaves())
    for task in dag.tasks:
        add("outlet", task.task_id, task.outlets)
        add("inlet", task.task_id, task.inlets)
    if refs:
        conn.execute(insert(AssetReference), refs)
    return unresolved


WATCHER_CONSUMER = "asset"  # trigger.consumer of a watcher's trigger


def _watcher_key(classpath: str, kwargs: Any) -> str:
    return dumps([classpath, kwargs])


def _sync_watchers(
    conn: Connection, dag_id: str, asset_id: int, asset: SerializedAsset, now: datetime
) -> None:
    """The asset's watchers, each on the trigger of its class and arguments: one running
    trigger serves every watcher with the same key (they share its events)."""
    triggers = {
        _watcher_key(r.classpath, r.kwargs): r.id
        for r in conn.execute(
            select(Trigger.id, Trigger.classpath, Trigger.kwargs).where(
                Trigger.consumer == WATCHER_CONSUMER, Trigger.completed.is_(False)
            )
        )
    }
    conn.execute(delete(AssetWatcher).where(AssetWatcher.asset_id == asset_id))
    for watcher in asset.watchers:
        key = _watcher_key(watcher.classpath, watcher.kwargs)
        trigger_id = triggers.get(key)
        if trigger_id is None:
            trigger_id = create_trigger(
                conn,
                classpath=watcher.classpath,
                kwargs=watcher.kwargs,
                consumer=WATCHER_CONSUMER,
                max_pending_events=None,
                now=now,
            )
            triggers[key] = trigger_id
        conn.execute(
            insert(AssetWatcher).values(
                asset_id=asset_id, name=watcher.name, trigger_id=trigger_id, dag_id=dag_id
            )
        )


def prune_watchers(conn: Connection) -> int:
    """Watchers whose DAG is gone or no longer defines them stop: their rows go, and a
    trigger no watcher uses any more is completed (its triggerer cancels it). Returns
    how many triggers were completed."""
    live_dags = select(Dag.dag_id).where(Dag.is_active.is_(True))
    conn.execute(delete(AssetWatcher).where(AssetWatcher.dag_id.not_in(live_dags)))
    # The DAG's current version no longer names the asset.
    named = select(AssetReference.asset_id).where(
        AssetReference.dag_id == AssetWatcher.dag_id, AssetReference.asset_id.is_not(None)
    )
    conn.execute(delete(AssetWatcher).where(~named.exists()))
    unused = conn.scalars(
        select(Trigger.id).where(
            Trigger.consumer == WATCHER_CONSUMER,
            Trigger.completed.is_(False),
            Trigger.id.not_in(select(AssetWatcher.trigger_id)),
        )
    ).all()
    return complete_triggers(conn, unused)


# -- events ------------------------------------------------------------------------------


def _asset_ids(conn: Connection, events: Sequence[NewAssetEvent], now: datetime) -> dict[str, int]:
    names = {e.name for e in events}
    found = {
        r.name: int(r.id)
        for r in conn.execute(select(Asset.id, Asset.name).where(Asset.name.in_(names)))
    }
    for event in events:
        if event.name in found:
            continue
        # An asset a task named at run time (through an alias): created as Airflow does.
        uri = event.uri or event.name
        taken = conn.execute(select(Asset.id, Asset.name).where(Asset.uri == uri)).first()
        if taken is not None:
            log.error(
                "task %s.%s emitted an event of Asset(name=%r, uri=%r) through alias %r, but "
                "asset %r has that URI: the event is recorded on %r",
                event.source_dag_id,
                event.source_task_id,
                event.name,
                uri,
                event.source_alias_name,
                taken.name,
                taken.name,
            )
            found[event.name] = int(taken.id)
            continue
        found[event.name] = int(
            conn.execute(
                insert(Asset)
                .values(
                    name=event.name,
                    uri=uri,
                    group=event.group,
                    extra={},
                    created_at=now,
                    updated_at=now,
                )
                .returning(Asset.id)
            ).scalar_one()
        )
    return found


def _link_aliases(conn: Connection, pairs: set[tuple[str, int]]) -> None:
    for alias_name, asset_id in pairs:
        alias_id = _alias_id(conn, alias_name)
        linked = conn.scalar(
            select(AssetAliasAsset.alias_id).where(
                AssetAliasAsset.alias_id == alias_id, AssetAliasAsset.asset_id == asset_id
            )
        )
        if linked is None:
            conn.execute(insert(AssetAliasAsset).values(alias_id=alias_id, asset_id=asset_id))


def consumers_of(conn: Connection, asset_ids: Collection[int]) -> dict[int, set[str]]:
    """Active, unpaused DAGs scheduled on each asset (directly or through an alias)."""
    direct = select(AssetReference.asset_id, AssetReference.dag_id).where(
        AssetReference.kind == "schedule", AssetReference.asset_id.in_(asset_ids)
    )
    via_alias = (
        select(AssetAliasAsset.asset_id, AssetReference.dag_id)
        .join(AssetReference, AssetReference.alias_id == AssetAliasAsset.alias_id)
        .where(AssetReference.kind == "schedule", AssetAliasAsset.asset_id.in_(asset_ids))
    )
    active = [
        q.join(Dag, Dag.dag_id == AssetReference.dag_id).where(
            Dag.is_active.is_(True), Dag.is_paused.is_(False)
        )
        for q in (direct, via_alias)
    ]
    out: dict[int, set[str]] = {}
    for asset_id, dag_id in conn.execute(union_all(*active)):
        assert asset_id is not None
        out.setdefault(asset_id, set()).add(dag_id)
    return out


def record_events(
    conn: Connection, events: Sequence[NewAssetEvent], now: datetime
) -> list[tuple[int, int]]:
    """Write the events and queue them for their consumers; returns ``(event id, asset
    id)`` of each event written (one whose ``dedup_key`` is already stored is not)."""
    if not events:
        return []
    keys = [e.dedup_key for e in events if e.dedup_key is not None]
    seen = set(conn.scalars(select(AssetEvent.dedup_key).where(AssetEvent.dedup_key.in_(keys))))
    ids = _asset_ids(conn, events, now)
    new: list[NewAssetEvent] = []
    for event in events:
        if event.dedup_key is not None:
            if event.dedup_key in seen:
                continue
            seen.add(event.dedup_key)
        new.append(event)
    if not new:
        return []
    # One statement for the batch (rows come back in no promised order: each says its
    # asset, which is all the queue needs).
    rows = conn.execute(
        insert(AssetEvent).returning(AssetEvent.id, AssetEvent.asset_id),
        [
            {
                "asset_id": ids[event.name],
                "extra": event.extra,
                "timestamp": now,
                "source_dag_id": event.source_dag_id,
                "source_task_id": event.source_task_id,
                "source_run_id": event.source_run_id,
                "source_map_index": event.source_map_index,
                "source_alias_name": event.source_alias_name,
                "source_trigger_id": event.source_trigger_id,
                "dedup_key": event.dedup_key,
            }
            for event in new
        ],
    ).all()
    written = sorted((int(event_id), int(asset_id)) for event_id, asset_id in rows)
    _link_aliases(
        conn,
        {(e.source_alias_name, ids[e.name]) for e in new if e.source_alias_name is not None},
    )
    consumers = consumers_of(conn, {a for _, a in written})
    queue = [
        {"event_id": e, "target_dag_id": d, "asset_id": a, "created_at": now}
        for e, a in written
        for d in sorted(consumers.get(a, ()))
    ]
    if queue:
        conn.execute(insert(AssetDagRunQueue), queue)
    return written


def find_asset(conn: Connection, asset: str) -> int | None:
    """The id of the asset named ``asset``, or whose URI it is."""
    found = conn.scalar(select(Asset.id).where(Asset.name == asset))
    if found is None:
        found = conn.scalar(select(Asset.id).where(Asset.uri == asset))
    return found


def record_watcher_events(
    conn: Connection, events: Sequence[tuple[int, int, str, str | None]], now: datetime
) -> list[tuple[int, int]]:
    """Each ``(trigger id, sequence index, payload JSON, dedup key)`` a watcher's trigger
    yielded, as an event of every asset watched through that trigger, its payload the
    event's ``extra`` (a payload that is not an object is ``{"payload": value}``). Written
    once however often the trigger yields it again (a resumed run, a redelivery)."""
    from tailrace.serialization import loads

    if not events:
        return []
    watched: dict[int, list[str]] = {}
    for trigger_id, name in conn.execute(
        select(AssetWatcher.trigger_id, Asset.name)
        .join(Asset, Asset.id == AssetWatcher.asset_id)
        .where(AssetWatcher.trigger_id.in_({e[0] for e in events}))
    ):
        watched.setdefault(trigger_id, []).append(name)
    new = []
    for trigger_id, sequence, payload, dedup_key in events:
        value = loads(payload)
        extra = value if isinstance(value, dict) else {"payload": value}
        source = dedup_key if dedup_key is not None else f"seq:{sequence}"
        for name in sorted(watched.get(trigger_id, ())):
            new.append(
                NewAssetEvent(
                    name=name,
                    extra=extra,
                    source_trigger_id=trigger_id,
                    dedup_key=f"watcher:{trigger_id}:{name}:{source}",
                )
            )
    return record_events(conn, new, now)
