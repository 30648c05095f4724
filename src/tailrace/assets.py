"""Reading assets as tasks, the CLI, the API and the UI see them: assets with their
producers and consumers, events, and what an asset-scheduled DAG still waits for."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import msgspec
from sqlalchemy import Connection, func, select

from tailrace.db.models import (
    Asset,
    AssetAlias,
    AssetAliasAsset,
    AssetDagRunQueue,
    AssetEvent,
    AssetReference,
    Dag,
    DagRun,
    DagRunAssetEvent,
    DagVersion,
)
from tailrace.execution.protocol import AssetEventRow, AssetEventsReply, GetAssetEvents
from tailrace.serialization import AssetCondition, SerializedDag, loads

_EVENT_COLUMNS = (
    AssetEvent.id,
    Asset.name,
    Asset.uri,
    Asset.group,
    AssetEvent.extra,
    AssetEvent.timestamp,
    AssetEvent.source_dag_id,
    AssetEvent.source_task_id,
    AssetEvent.source_run_id,
    AssetEvent.source_map_index,
    AssetEvent.source_alias_name,
)


def _event_query(name: str | None, alias: str | None) -> Any:
    q = select(*_EVENT_COLUMNS).join(Asset, Asset.id == AssetEvent.asset_id)
    if alias is not None:
        q = q.join(AssetAlias, AssetAlias.name == AssetEvent.source_alias_name).where(
            AssetAlias.name == alias
        )
    if name is not None:
        q = q.where(Asset.name == name)
    return q


def answer_asset_events(conn: Connection, req: GetAssetEvents) -> AssetEventsReply:
    """A running task's ``inlet_events`` page, or its run's ``triggering_asset_events``."""
    if req.dag_run_id is not None:
        q = (
            select(*_EVENT_COLUMNS)
            .join(Asset, Asset.id == AssetEvent.asset_id)
            .join(DagRunAssetEvent, DagRunAssetEvent.event_id == AssetEvent.id)
            .where(DagRunAssetEvent.dag_run_id == req.dag_run_id)
            .order_by(AssetEvent.id)
        )
        rows = [AssetEventRow(*r) for r in conn.execute(q)]
        return AssetEventsReply(len(rows), rows)
    q = _event_query(req.name, req.alias)
    total = conn.scalar(select(func.count()).select_from(q.subquery())) or 0
    rows = []
    if req.limit > 0:
        rows = [
            AssetEventRow(*r)
            for r in conn.execute(q.order_by(AssetEvent.id).offset(req.offset).limit(req.limit))
        ]
    return AssetEventsReply(total, rows)


def event_dict(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "asset": row.name,
        "uri": row.uri,
        "extra": row.extra,
        "timestamp": row.timestamp,
        "source_dag_id": row.source_dag_id,
        "source_task_id": row.source_task_id,
        "source_run_id": row.source_run_id,
        "source_map_index": row.source_map_index,
        "source_alias_name": row.source_alias_name,
    }


def list_events(
    conn: Connection,
    *,
    asset: str | None = None,
    dag_run_id: int | None = None,
    before: int | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Events, newest first: of one asset (by name), or those that started a run."""
    q = _event_query(asset, None)
    if dag_run_id is not None:
        q = q.join(DagRunAssetEvent, DagRunAssetEvent.event_id == AssetEvent.id).where(
            DagRunAssetEvent.dag_run_id == dag_run_id
        )
    if before is not None:
        q = q.where(AssetEvent.id < before)
    q = q.order_by(AssetEvent.id.desc())
    if limit is not None:
        q = q.limit(limit)
    return [event_dict(r) for r in conn.execute(q)]


def list_assets(
    conn: Connection, *, after: int | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Assets by id, with their event count, latest event, producers and consumers."""
    q = select(Asset.id, Asset.name, Asset.uri, Asset.group, Asset.extra).order_by(Asset.id)
    if after is not None:
        q = q.where(Asset.id > after)
    if limit is not None:
        q = q.limit(limit)
    assets = conn.execute(q).all()
    ids = [a.id for a in assets]
    stats = {
        r.asset_id: r
        for r in conn.execute(
            select(
                AssetEvent.asset_id,
                func.count().label("events"),
                func.max(AssetEvent.timestamp).label("last"),
            )
            .where(AssetEvent.asset_id.in_(ids))
            .group_by(AssetEvent.asset_id)
        )
    }
    refs = _references(conn, ids)
    out = []
    for a in assets:
        stat = stats.get(a.id)
        ref = refs.get(a.id, {})
        out.append(
            {
                "id": a.id,
                "name": a.name,
                "uri": a.uri,
                "group": a.group,
                "extra": a.extra,
                "events": stat.events if stat else 0,
                "last_event_at": stat.last if stat else None,
                "producers": sorted(ref.get("outlet", set())),
                "consumers": sorted(ref.get("schedule", set())),
            }
        )
    return out


def _references(conn: Connection, asset_ids: Collection[int]) -> dict[int, dict[str, set[str]]]:
    """For each asset: the DAGs (``dag.task`` for outlets) naming it, by kind. An alias's
    references count for the assets it resolved to."""
    direct = select(
        AssetReference.asset_id, AssetReference.kind, AssetReference.dag_id, AssetReference.task_id
    ).where(AssetReference.asset_id.in_(asset_ids))
    via_alias = (
        select(
            AssetAliasAsset.asset_id,
            AssetReference.kind,
            AssetReference.dag_id,
            AssetReference.task_id,
        )
        .join(AssetReference, AssetReference.alias_id == AssetAliasAsset.alias_id)
        .where(AssetAliasAsset.asset_id.in_(asset_ids))
    )
    out: dict[int, dict[str, set[str]]] = {}
    for q in (direct, via_alias):
        active = q.join(Dag, Dag.dag_id == AssetReference.dag_id).where(Dag.is_active.is_(True))
        for asset_id, kind, dag_id, task_id in conn.execute(active):
            assert asset_id is not None
            who = f"{dag_id}.{task_id}" if kind == "outlet" and task_id else dag_id
            out.setdefault(asset_id, {}).setdefault(kind, set()).add(who)
    return out


def dependency_graph(conn: Connection) -> dict[str, Any]:
    """DAGs linked by assets: nodes (DAGs and assets) and edges producer → asset → consumer."""
    rows = conn.execute(
        select(AssetReference.dag_id, AssetReference.kind, Asset.name)
        .join(Asset, Asset.id == AssetReference.asset_id)
        .join(Dag, Dag.dag_id == AssetReference.dag_id)
        .where(Dag.is_active.is_(True), AssetReference.kind.in_(("schedule", "outlet")))
    ).all()
    alias_rows = conn.execute(
        select(AssetReference.dag_id, AssetReference.kind, Asset.name)
        .join(AssetAliasAsset, AssetAliasAsset.alias_id == AssetReference.alias_id)
        .join(Asset, Asset.id == AssetAliasAsset.asset_id)
        .join(Dag, Dag.dag_id == AssetReference.dag_id)
        .where(Dag.is_active.is_(True), AssetReference.kind.in_(("schedule", "outlet")))
    ).all()
    edges: set[tuple[str, str]] = set()
    dags: set[str] = set()
    assets: set[str] = set()
    for dag_id, kind, name in [*rows, *alias_rows]:
        dags.add(dag_id)
        assets.add(name)
        edge = (f"dag:{dag_id}", f"asset:{name}")
        edges.add(edge if kind == "outlet" else (edge[1], edge[0]))
    nodes = [{"id": f"dag:{d}", "kind": "dag", "label": d} for d in sorted(dags)]
    nodes += [{"id": f"asset:{a}", "kind": "asset", "label": a} for a in sorted(assets)]
    return {
        "nodes": nodes,
        "edges": [{"source": s, "target": t} for s, t in sorted(edges)],
    }


def _condition_state(
    cond: AssetCondition, queued: set[int], ids: dict[str, int], aliases: dict[str, set[int]]
) -> dict[str, Any]:
    if cond.kind in ("all", "any"):
        args = [_condition_state(a, queued, ids, aliases) for a in cond.args]
        met = all(a["met"] for a in args) if cond.kind == "all" else any(a["met"] for a in args)
        return {"kind": cond.kind, "met": met, "args": args}
    if cond.kind == "alias":
        met = bool(aliases.get(cond.name or "", set()) & queued)
        return {"kind": "alias", "name": cond.name, "met": met}
    key = cond.name if cond.name is not None else f"uri:{cond.uri}"
    return {"kind": "asset", "name": cond.name or cond.uri, "met": ids.get(key) in queued}


def evaluate(
    cond: AssetCondition, queued: set[int], ids: dict[str, int], aliases: dict[str, set[int]]
) -> bool:
    """Whether ``cond`` holds when the assets ``queued`` (ids) have events waiting."""
    return bool(_condition_state(cond, queued, ids, aliases)["met"])


def condition_lookups(
    conn: Connection, cond: AssetCondition, known: dict[str, int] | None = None
) -> tuple[dict[str, int], dict[str, set[int]]]:
    """Asset ids by name (``uri:…`` for a reference by URI) and alias resolutions.
    ``known`` holds ids looked up before, and takes those found now: an asset's id never
    changes (assets are not deleted), while an alias may resolve to more assets later."""
    known = {} if known is None else known
    leaves = cond.leaves()
    names = {leaf.name for leaf in leaves if leaf.kind in ("asset", "ref") and leaf.name}
    uris = {leaf.uri for leaf in leaves if leaf.kind == "ref" and leaf.name is None and leaf.uri}
    names -= known.keys()
    uris = {uri for uri in uris if f"uri:{uri}" not in known}
    if names:
        known.update(conn.execute(select(Asset.name, Asset.id).where(Asset.name.in_(names))).all())
    if uris:
        for uri, asset_id in conn.execute(select(Asset.uri, Asset.id).where(Asset.uri.in_(uris))):
            known[f"uri:{uri}"] = asset_id
    alias_names = {leaf.name for leaf in leaves if leaf.kind == "alias" and leaf.name}
    aliases: dict[str, set[int]] = {}
    if alias_names:
        for name, asset_id in conn.execute(
            select(AssetAlias.name, AssetAliasAsset.asset_id)
            .join(AssetAliasAsset, AssetAliasAsset.alias_id == AssetAlias.id)
            .where(AssetAlias.name.in_(alias_names))
        ):
            aliases.setdefault(name, set()).add(asset_id)
    return known, aliases


def waiting_for(conn: Connection, dag_id: str) -> dict[str, Any] | None:
    """What an asset-scheduled DAG waits for: its condition with each part ``met`` or not
    by the events queued for it; None for a DAG not scheduled on assets."""
    data = conn.scalar(
        select(DagVersion.data)
        .join(Dag, Dag.latest_version_id == DagVersion.id)
        .where(Dag.dag_id == dag_id)
    )
    if data is None:
        return None
    dag = msgspec.convert(loads(data), SerializedDag)
    cond = dag.schedule.condition
    if dag.schedule.kind != "asset" or cond is None:
        return None
    queued = set(
        conn.scalars(
            select(AssetDagRunQueue.asset_id).where(AssetDagRunQueue.target_dag_id == dag_id)
        )
    )
    ids, aliases = condition_lookups(conn, cond)
    state = _condition_state(cond, queued, ids, aliases)
    pending = conn.scalar(select(func.count()).where(AssetDagRunQueue.target_dag_id == dag_id))
    last_run = conn.scalar(
        select(func.max(DagRun.queued_at)).where(
            DagRun.dag_id == dag_id, DagRun.run_type == "asset_triggered"
        )
    )
    return {
        "dag_id": dag_id,
        "condition": state,
        "description": dag.schedule.description,
        "queued_events": pending or 0,
        "missing": _missing(state),
        "last_asset_triggered_run_at": last_run,
    }


def _missing(state: dict[str, Any]) -> list[str]:
    """The assets whose events would let the condition hold, as plain names (for an
    ``any`` none of whose parts is met: each part's)."""
    if state["met"]:
        return []
    if state["kind"] in ("all", "any"):
        return [m for arg in state["args"] for m in _missing(arg)]
    return [("alias:" if state["kind"] == "alias" else "") + str(state["name"])]


def get_event(conn: Connection, event_id: int) -> dict[str, Any] | None:
    row = conn.execute(_event_query(None, None).where(AssetEvent.id == event_id)).first()
    return None if row is None else event_dict(row)
