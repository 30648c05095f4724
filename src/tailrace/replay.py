"""Replay: a new run of a consumer over the retained streams of an earlier run.

The DAG's latest version runs — its consumer's code may have changed since — but nothing
upstream of the re-run part runs again: those tasks' output streams and XComs are copied
from the source run and they are marked success, so no producer runs and no source is
touched. The consumer and everything downstream of it then run as in a live run: the same
``.iterate()`` expansion, a page at a time, over the same items in the same order. Tasks
that are neither (another branch) are marked skipped. The run's ``replay_of`` names its
source run.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Engine, insert, literal, select, update

from tailrace import transitions
from tailrace.clock import utcnow
from tailrace.dagrun import create_dag_run, latest_version
from tailrace.db.models import DagRun, Stream, StreamItem, TaskInstance, XCom
from tailrace.db.types import UTCDateTime
from tailrace.errors import ReplayError, RunNotFoundError
from tailrace.serialization import SerializedDag
from tailrace.state import DagRunState, RunType
from tailrace.state import TaskInstanceState as TIS


def replay_run(
    engine: Engine,
    dag_id: str,
    source_run_id: str,
    task_id: str,
    *,
    run_id: str | None = None,
) -> tuple[int, str]:
    """Create the replay run (queued, for the scheduler); returns (primary key, run id)."""
    with engine.begin() as conn:
        now = utcnow()
        source = conn.execute(
            select(DagRun.id, DagRun.state).where(
                DagRun.dag_id == dag_id, DagRun.run_id == source_run_id
            )
        ).first()
        if source is None:
            raise RunNotFoundError(dag_id, source_run_id)
        if source.state not in (DagRunState.SUCCESS, DagRunState.FAILED):
            raise ReplayError(
                f"run {source_run_id!r} of DAG {dag_id!r} is {source.state}: replay a finished "
                "run (its streams are complete)"
            )
        version_id, dag = latest_version(conn, dag_id)
        rerun = _rerun(dag, task_id)
        inputs = _inputs(dag, rerun)
        found = _source_instances(conn, source.id, inputs, dag_id, source_run_id)
        pk = create_dag_run(
            conn,
            dag,
            version_id,
            run_type=RunType.MANUAL,
            now=now,
            logical_date=now,
            conf=None,
            run_id=run_id or f"replay__{now.isoformat()}",
        )
        conn.execute(update(DagRun).where(DagRun.id == pk).values(replay_of=source_run_id))
        new = dict(
            conn.execute(
                select(TaskInstance.task_id, TaskInstance.id).where(TaskInstance.dag_run_id == pk)
            ).all()
        )
        for name in inputs:
            _copy_outputs(conn, source.id, found[name], pk, new[name], name, now)
        transitions.mark(conn, [new[t] for t in inputs], TIS.SUCCESS, now)
        others = [new[t.task_id] for t in dag.tasks if t.task_id not in rerun | inputs]
        transitions.mark(conn, others, TIS.SKIPPED, now)
        key = conn.scalar(select(DagRun.run_id).where(DagRun.id == pk))
    assert key is not None
    return pk, key


def _rerun(dag: SerializedDag, task_id: str) -> set[str]:
    """The consumer and everything downstream of it, in the DAG's latest version."""
    names = {t.task_id for t in dag.tasks}
    if task_id not in names:
        raise ReplayError(
            f"DAG {dag.dag_id!r} has no task {task_id!r} any more (its latest version has "
            f"{', '.join(sorted(names))}): replay a consumer that still exists"
        )
    out, todo = set(), [task_id]
    while todo:
        current = todo.pop()
        if current not in out:
            out.add(current)
            todo.extend(dag.task(current).downstream)
    return out


def _inputs(dag: SerializedDag, rerun: set[str]) -> set[str]:
    """Every task upstream of the re-run part (its outputs come from the source run)."""
    out: set[str] = set()
    todo = [u for t in rerun for u in dag.task(t).upstream if u not in rerun]
    while todo:
        current = todo.pop()
        if current not in out:
            out.add(current)
            todo.extend(dag.task(current).upstream)
    return out


def _source_instances(
    conn: Connection, source_pk: int, inputs: set[str], dag_id: str, source_run_id: str
) -> dict[str, int]:
    rows = conn.execute(
        select(
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.id,
            TaskInstance.state,
            Stream.items_removed_at,
        )
        .outerjoin(Stream, Stream.task_instance_id == TaskInstance.id)
        .where(TaskInstance.dag_run_id == source_pk, TaskInstance.task_id.in_(sorted(inputs)))
    ).all()
    by_task = {r.task_id: r for r in rows if r.map_index == -1}
    for name in sorted(inputs):
        row = by_task.get(name)
        where = f"task {name!r} of run {source_run_id!r} (DAG {dag_id!r})"
        if any(r.task_id == name and r.map_index >= 0 for r in rows):
            raise ReplayError(
                f"{where} is mapped: replay starts from unmapped tasks' streams; replay "
                "from a consumer whose upstream tasks are not mapped"
            )
        if row is None:
            raise ReplayError(
                f"{where} did not exist: the DAG gained it since, so there is no recorded "
                "output to replay it from; replay from a task downstream of it"
            )
        if row.state != TIS.SUCCESS:
            raise ReplayError(f"{where} ended {row.state}: only a successful output is replayed")
        if row.items_removed_at is not None:
            raise ReplayError(
                f"the stream of {where} was removed on {row.items_removed_at.isoformat()} "
                "(past its retention: the stream_retention_seconds setting or the DAG's "
                "stream_retention); nothing is left to replay"
            )
    return {name: by_task[name].id for name in inputs}


def _copy_outputs(
    conn: Connection,
    source_pk: int,
    source_ti: int,
    pk: int,
    ti_id: int,
    task_id: str,
    now: datetime,
) -> None:
    """The source try's output stream and XComs, as the new instance's own."""
    header = conn.execute(
        select(Stream.id, Stream.key, Stream.length, Stream.closed).where(
            Stream.task_instance_id == source_ti
        )
    ).all()
    for h in header:
        stream_id: int = conn.execute(
            insert(Stream)
            .values(
                task_instance_id=ti_id,
                key=h.key,
                length=h.length,
                closed=h.closed,
                created_at=now,
                closed_at=now if h.closed else None,
            )
            .returning(Stream.id)
        ).scalar_one()
        conn.execute(
            insert(StreamItem).from_select(
                ["stream_id", "index", "value"],
                select(literal(stream_id), StreamItem.index, StreamItem.value).where(
                    StreamItem.stream_id == h.id
                ),
            )
        )
    conn.execute(
        insert(XCom).from_select(
            ["dag_run_id", "task_id", "map_index", "key", "value", "length", "created_at"],
            select(
                literal(pk),
                XCom.task_id,
                XCom.map_index,
                XCom.key,
                XCom.value,
                XCom.length,
                literal(now, UTCDateTime()),
            ).where(XCom.dag_run_id == source_pk, XCom.task_id == task_id, XCom.map_index == -1),
        )
    )
