"""Creating DAG runs and their task instances; validating a run's conf against params."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import Connection, Engine, bindparam, delete, func, insert, select

from tailrace import transitions
from tailrace.clock import utcnow
from tailrace.db.models import Dag, DagRun, DagVersion, TaskInstance, XCom
from tailrace.errors import (
    ConfTooLargeError,
    ConfValidationError,
    DagNotFoundError,
    RunExistsError,
    RunNotFoundError,
)
from tailrace.serialization import SerializedDag, dumps, loads
from tailrace.serialization._models import SerializedParam, SerializedTask
from tailrace.state import FAILED_TI_STATES, DagRunState, RunType
from tailrace.state import TaskInstanceState as TIS
from tailrace.store import deadlines
from tailrace.store.triggers import complete_triggers
from tailrace.streams import reset_streams, stream_summaries

_NO_DEFAULT = object()


def resolve_params(dag: SerializedDag, conf: Mapping[str, Any]) -> dict[str, Any]:
    """Params as a task will see them: defaults, overridden by conf, each validated."""
    if not isinstance(conf, Mapping):
        raise ConfValidationError(dag.dag_id, None, "conf must be a JSON object")
    resolved: dict[str, Any] = {}
    for name, param in dag.params.items():
        value = conf.get(name, param.default if param.has_default else _NO_DEFAULT)
        if value is _NO_DEFAULT:
            raise ConfValidationError(
                dag.dag_id, name, "has no default and was not given in conf; pass it with --conf"
            )
        _validate(dag.dag_id, name, param, value)
        resolved[name] = value
    for name, value in conf.items():
        resolved.setdefault(name, value)
    return resolved


def _validate(dag_id: str, name: str, param: SerializedParam, value: Any) -> None:
    if not param.schema:
        return
    import jsonschema  # here: most runs have no schema, and the CLI starts faster without it

    try:
        jsonschema.validate(value, param.schema)
    except jsonschema.ValidationError as exc:
        raise ConfValidationError(dag_id, name, f"{value!r} is invalid: {exc.message}") from None


def run_id_for(run_type: RunType, when: datetime) -> str:
    return f"{run_type.value}__{when.isoformat()}"


def latest_version(conn: Connection, dag_id: str) -> tuple[int, SerializedDag]:
    row = conn.execute(
        select(DagVersion.id, DagVersion.data)
        .join(Dag, Dag.latest_version_id == DagVersion.id)
        .where(Dag.dag_id == dag_id, Dag.is_active.is_(True))
    ).first()
    if row is None:
        raise DagNotFoundError(dag_id)
    return row.id, msgspec.convert(loads(row.data), SerializedDag)


# Built once: creating runs is on the scheduler's hot path (asset-triggered runs).
_RUN_EXISTS = select(DagRun.id).where(
    DagRun.dag_id == bindparam("dag_id"), DagRun.run_id == bindparam("run_id")
)
_INSERT_RUN = insert(DagRun).returning(DagRun.id)


def create_dag_run(
    conn: Connection,
    dag: SerializedDag,
    dag_version_id: int,
    *,
    run_type: RunType,
    now: datetime,
    logical_date: datetime | None = None,
    conf: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    backfill_id: int | None = None,
) -> int:
    """Insert a queued run and one task instance per task (a placeholder if mapped)."""
    conf = dict(conf or {})
    resolve_params(dag, conf)
    run_id = run_id or run_id_for(run_type, logical_date or now)
    exists = conn.execute(_RUN_EXISTS, {"dag_id": dag.dag_id, "run_id": run_id}).first()
    if exists is not None:
        raise RunExistsError(dag.dag_id, run_id)
    dag_run_id: int = conn.execute(
        _INSERT_RUN,
        {
            "dag_id": dag.dag_id,
            "run_id": run_id,
            "dag_version_id": dag_version_id,
            "run_type": run_type.value,
            "state": DagRunState.QUEUED.value,
            "logical_date": logical_date,
            "data_interval_start": logical_date,
            "data_interval_end": logical_date,
            "conf": conf,
            "queued_at": now,
            "created_at": now,
            "backfill_id": backfill_id,
        },
    ).scalar_one()
    rows = [ti_row(dag_run_id, dag.dag_id, run_id, task, -1, now) for task in dag.tasks]
    if rows:
        conn.execute(insert(TaskInstance), rows)
    deadlines.create_for_run(conn, dag, dag_run_id, logical_date=logical_date, now=now)
    return dag_run_id


def trigger_dag_run(
    engine: Engine,
    dag_id: str,
    conf: dict[str, Any],
    *,
    run_id: str | None = None,
    logical_date: datetime | None = None,
    max_conf_bytes: int | None = None,
    then: Callable[[Connection, int, str], object] | None = None,
) -> tuple[int, str]:
    """Create a manual run of the DAG's latest version; returns (primary key, run id).
    A ``conf`` over ``max_conf_bytes`` as JSON is refused, as an XCom that size would be:
    every listing of runs returns it. ``then(conn, pk, run_id)`` runs in the creating
    transaction (what it reads is the run as created, whatever a scheduler does next)."""
    if max_conf_bytes is not None:
        size = len(dumps(conf).encode())
        if size > max_conf_bytes:
            raise ConfTooLargeError(dag_id, size, max_conf_bytes)
    with engine.begin() as conn:
        version_id, dag = latest_version(conn, dag_id)
        now = utcnow()
        pk = create_dag_run(
            conn,
            dag,
            version_id,
            run_type=RunType.MANUAL,
            now=now,
            logical_date=logical_date or now,
            conf=conf,
            run_id=run_id,
        )
        run_key = conn.scalar(select(DagRun.run_id).where(DagRun.id == pk))
        assert run_key is not None
        if then is not None:
            then(conn, pk, run_key)
    return pk, run_key


def ti_row(
    dag_run_id: int, dag_id: str, run_id: str, task: SerializedTask, map_index: int, now: datetime
) -> dict[str, Any]:
    """A new, unscheduled task instance row, ready for a bulk insert."""
    return {
        "dag_run_id": dag_run_id,
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task.task_id,
        "map_index": map_index,
        "state": None,
        "try_number": 0,
        "max_tries": task.retries,
        "operator": task.operator,
        "queue": task.queue,
        "priority_weight": task.priority_weight,
        "pool": task.pool,
        "pool_slots": task.pool_slots,
        "updated_at": now,
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def run_summary(
    conn: Connection, dag_run_id: int, *, instances_per_task: int | None = None
) -> dict[str, Any]:
    """A run and its task instances as plain JSON-ready data.

    With ``instances_per_task``, a mapped task lists only its first instances and is
    summarised under ``mapped`` (instance count and count per state): an ``.iterate()``
    run may hold a million of them.
    """
    run = conn.execute(select(DagRun).where(DagRun.id == dag_run_id)).one()
    query = select(TaskInstance).where(TaskInstance.dag_run_id == dag_run_id)
    mapped: dict[str, dict[str, Any]] = {}
    if instances_per_task is not None:
        query = query.where(TaskInstance.map_index < instances_per_task)
        mapped = _mapped_beyond(conn, dag_run_id, instances_per_task)
    tis = conn.execute(query.order_by(TaskInstance.id)).all()
    # Group mapped instances under their task, in the order tasks were created.
    first_seen: dict[str, int] = {}
    for ti in tis:
        first_seen.setdefault(ti.task_id, ti.id)
    tis = sorted(tis, key=lambda ti: (first_seen[ti.task_id], ti.map_index))
    streams = {s["task_instance_id"]: s for s in stream_summaries(conn, dag_run_id=dag_run_id)}
    return {
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "state": run.state,
        "logical_date": _iso(run.logical_date),
        "start_date": _iso(run.start_date),
        "end_date": _iso(run.end_date),
        "conf": run.conf,
        "task_instances": [
            {
                "task_id": ti.task_id,
                "map_index": ti.map_index,
                "rendered_map_index": ti.rendered_map_index,
                "state": ti.state,
                "try_number": ti.try_number,
                "queued_at": _iso(ti.queued_at),
                "start_date": _iso(ti.start_date),
                "end_date": _iso(ti.end_date),
                "duration": ti.duration,
                "error": ti.error,
                **({"stream": _stream_figures(streams[ti.id])} if ti.id in streams else {}),
            }
            for ti in tis
        ],
        **({"mapped": mapped} if mapped else {}),
    }


def _mapped_beyond(conn: Connection, dag_run_id: int, limit: int) -> dict[str, dict[str, Any]]:
    """Tasks with more than ``limit`` mapped instances: their count and states."""
    out: dict[str, dict[str, Any]] = {}
    rows = conn.execute(
        select(TaskInstance.task_id, TaskInstance.state, func.count())
        .where(TaskInstance.dag_run_id == dag_run_id, TaskInstance.map_index >= 0)
        .group_by(TaskInstance.task_id, TaskInstance.state)
    )
    for task_id, state, count in rows:
        entry = out.setdefault(task_id, {"instances": 0, "states": {}})
        entry["instances"] += count
        entry["states"][state or "none"] = count
    return {t: e for t, e in out.items() if e["instances"] > limit}


# A task instance no longer waiting on a trigger: nothing to resume, no deadline.
def clear_task_instances(
    conn: Connection,
    dag_run_id: int,
    task_ids: Collection[str] | None,
    now: datetime,
    *,
    only_failed: bool = False,
) -> int:
    """Reset task instances so they run again; cancels the triggers of deferred ones.

    Each cleared instance gets its full retries again (Airflow semantics), its XComs are
    removed, and a finished run goes back to running. A try still running on a worker
    finishes there, but its report no longer applies (its try is superseded).
    ``only_failed`` (Airflow's name): only instances that failed or whose upstream failed —
    of a mapped task, just those instances.
    """
    q = select(
        TaskInstance.id,
        TaskInstance.task_id,
        TaskInstance.map_index,
        TaskInstance.try_number,
        TaskInstance.trigger_id,
        TaskInstance.state,
    ).where(TaskInstance.dag_run_id == dag_run_id)
    if task_ids:
        q = q.where(TaskInstance.task_id.in_(list(task_ids)))
    if only_failed:
        q = q.where(TaskInstance.state.in_(sorted(FAILED_TI_STATES)))
    rows = conn.execute(q).all()
    if not rows:
        return 0
    version_id = conn.scalar(select(DagRun.dag_version_id).where(DagRun.id == dag_run_id))
    data = conn.scalar(select(DagVersion.data).where(DagVersion.id == version_id))
    assert data is not None, f"run {dag_run_id} has no DAG version"
    dag = msgspec.convert(loads(data), SerializedDag)
    retries = {t.task_id: t.retries for t in dag.tasks}
    # Clearing work clears its setups and their teardowns, as in Airflow.
    partners = setups_and_teardowns(dag, {r.task_id for r in rows}) - {r.task_id for r in rows}
    if partners:
        rows = [
            *rows,
            *conn.execute(
                select(*q.selected_columns).where(
                    TaskInstance.dag_run_id == dag_run_id,
                    TaskInstance.task_id.in_(sorted(partners)),
                )
            ).all(),
        ]
    complete_triggers(
        conn, [r.trigger_id for r in rows if r.state == TIS.DEFERRED and r.trigger_id]
    )
    transitions.clear(
        conn,
        [
            transitions.Cleared(r.id, max_tries=r.try_number + retries.get(r.task_id, 0))
            for r in rows
        ],
        now,
    )
    if only_failed:
        conn.execute(
            delete(XCom).where(
                XCom.dag_run_id == dag_run_id,
                XCom.task_id == bindparam("b_task"),
                XCom.map_index == bindparam("b_map"),
            ),
            [{"b_task": r.task_id, "b_map": r.map_index} for r in rows],
        )
    else:
        conn.execute(
            delete(XCom).where(
                XCom.dag_run_id == dag_run_id, XCom.task_id.in_({r.task_id for r in rows})
            )
        )
    reset_streams(conn, [r.id for r in rows])
    transitions.requeue_run(conn, dag_run_id, now)
    # Queued again: a deadline counted from the queue time counts from now.
    deadlines.create_for_run(conn, dag, dag_run_id, logical_date=None, now=now, queued_only=True)
    return len(rows)


def setups_and_teardowns(dag: SerializedDag, task_ids: Collection[str]) -> set[str]:
    """The setups upstream of ``task_ids`` (any distance) and the teardowns of those setups
    and of the setups among ``task_ids``: what clearing ``task_ids`` clears with them."""
    if not any(t.is_setup or t.is_teardown for t in dag.tasks):
        return set()
    setups: set[str] = set()
    stack = list(task_ids)
    seen: set[str] = set()
    while stack:
        task = dag.task(stack.pop())
        if task.task_id in seen:
            continue
        seen.add(task.task_id)
        if task.is_setup:
            setups.add(task.task_id)
        stack.extend(task.upstream)
    teardowns = {t.task_id for t in dag.tasks if t.is_teardown and setups.intersection(t.upstream)}
    return setups | teardowns


def mark_task_instances(
    conn: Connection, dag_run_id: int, task_ids: Collection[str], state: str, now: datetime
) -> int:
    """Set task instances to success or failed by hand; cancels deferred ones' triggers."""
    if state not in transitions.MARKABLE:
        raise ValueError(f"can only mark success, failed or skipped, not {state!r}")
    rows = conn.execute(
        select(TaskInstance.id, TaskInstance.trigger_id, TaskInstance.state).where(
            TaskInstance.dag_run_id == dag_run_id, TaskInstance.task_id.in_(list(task_ids))
        )
    ).all()
    complete_triggers(
        conn, [r.trigger_id for r in rows if r.state == TIS.DEFERRED and r.trigger_id]
    )
    transitions.mark(conn, [r.id for r in rows], state, now)
    return len(rows)


def find_run(conn: Connection, dag_id: str, run_id: str | None) -> int:
    """A run's primary key: by run id, or the DAG's latest run."""
    q = select(DagRun.id).where(DagRun.dag_id == dag_id)
    q = q.where(DagRun.run_id == run_id) if run_id else q.order_by(DagRun.id.desc()).limit(1)
    pk = conn.scalar(q)
    if pk is None:
        raise RunNotFoundError(dag_id, run_id)
    return pk


def _stream_figures(summary: dict[str, Any]) -> dict[str, Any]:
    keys = ("produced", "acknowledged", "pending", "items", "events_per_second")
    return {k: summary[k] for k in (*keys, "paused_by_backpressure")}
