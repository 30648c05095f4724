"""Lazy expansion (``.iterate()``): mapped instances are created as their items arrive.

Everything here counts; nothing decodes an item or runs user code. A source task's items
are known from the database alone — a streaming task's ``stream.length``, a finished
task's list length (``xcom.length``), or a mapped task's finished instances — and the
shape of the ``.iterate()`` argument (:class:`~tailrace.serialization.StreamSpec`) says
how many items of the argument exist: ``zip`` is as long as its shortest input,
``concat`` moves to its next input once the previous one closed, ``batched(n)`` has a
whole batch only once ``n`` items exist. Filtered items keep their index (their instance
finishes skipped in the worker), so no count ever depends on a callable.

Instance ``i`` of the iterate task has ``map_index = i``. Each pass creates at most
``budget`` instances per task, in one bulk insert in the step's transaction; the next
index comes from the instances that exist, so a scheduler killed mid-expansion resumes
exactly where its last committed pass stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Insert,
    and_,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
)

from tailrace import transitions
from tailrace.dagrun import ti_row
from tailrace.db.models import Stream, TaskInstance, XCom
from tailrace.serialization import SerializedDag, SerializedTask, StreamSpec
from tailrace.state import FAILED_TI_STATES, FINISHED_TI_STATES
from tailrace.state import TaskInstanceState as TIS

_UNFINISHED = or_(
    TaskInstance.state.is_(None),
    TaskInstance.state.in_([s for s in TIS if s not in FINISHED_TI_STATES]),
)
# States a failed or skipped source item gives the instance made from it.
_ITEM_STATE: dict[str, str | None] = {
    TIS.SUCCESS: None,
    TIS.SKIPPED: TIS.SKIPPED,
    TIS.REMOVED: TIS.SKIPPED,
    TIS.FAILED: TIS.UPSTREAM_FAILED,
    TIS.UPSTREAM_FAILED: TIS.UPSTREAM_FAILED,
}
_WORST: dict[str | None, int] = {None: 0, TIS.SKIPPED: 1, TIS.UPSTREAM_FAILED: 2}
STATE_WINDOW = 5000


@dataclass(frozen=True)
class Available:
    """How many items of an argument exist now, and whether more will come."""

    length: int
    closed: bool
    # A source ended in failure: once its items are done the task is upstream_failed.
    failed: bool = False
    # A source cannot be iterated at all (its value is not a list): fails the task.
    error: str | None = None


class Sources:
    """Facts about the source tasks of one run, read once per pass and cached."""

    def __init__(
        self, conn: Connection, run_id: int, task: Callable[[str], SerializedTask]
    ) -> None:
        self.conn = conn
        self.run_id = run_id
        self.task = task
        self._available: dict[tuple[str, str], Available] = {}
        self._states: dict[str, dict[int, str | None]] = {}

    def _where(self, task_id: str) -> tuple[ColumnElement[bool], ...]:
        return _instances_of(self.run_id, task_id)

    def available(self, task_id: str, key: str) -> Available:
        found = self._available.get((task_id, key))
        if found is None:
            if self.task(task_id).is_mapped:
                found = self._mapped(task_id)
            else:
                found = self._single(task_id, key)
            self._available[(task_id, key)] = found
        return found

    def _single(self, task_id: str, key: str) -> Available:
        row = self.conn.execute(
            select(TaskInstance.state, Stream.length)
            .outerjoin(
                Stream,
                and_(Stream.task_instance_id == TaskInstance.id, Stream.key == key),
            )
            .where(*self._where(task_id), TaskInstance.map_index == -1)
        ).one()
        done = row.state in FINISHED_TI_STATES
        failed = row.state in FAILED_TI_STATES
        if row.length is not None:  # a streaming task: its items are counted as they land
            return Available(int(row.length), closed=done, failed=failed)
        if row.state != TIS.SUCCESS:
            return Available(0, closed=done, failed=failed)
        length = self.conn.execute(
            select(XCom.length).where(
                XCom.dag_run_id == self.run_id,
                XCom.task_id == task_id,
                XCom.key == key,
                XCom.map_index == -1,
            )
        ).first()
        if length is None or length.length is None:
            what = "pushed no XCom" if length is None else "returned something that is not a list"
            return Available(
                0,
                closed=True,
                error=f"task {task_id!r} {what} under {key!r}; map over a list or a stream",
            )
        return Available(int(length.length), closed=True)

    def _mapped(self, task_id: str) -> Available:
        where = self._where(task_id)
        placeholder = self.conn.execute(
            select(TaskInstance.state).where(*where, TaskInstance.map_index == -1)
        ).first()
        count = instance_count(self.conn, self.run_id, task_id)
        # Items flow in index order: instance i's output is item i once 0..i have finished.
        prefix = finished_prefix(self.conn, self.run_id, task_id, count)
        if placeholder is None:  # fully expanded
            return Available(prefix, closed=prefix == count)
        done = placeholder.state in FINISHED_TI_STATES
        return Available(
            prefix,
            closed=done and prefix == count,
            failed=placeholder.state in FAILED_TI_STATES,
        )

    def item_state(self, task_id: str, index: int) -> str | None:
        """The state instance ``index`` of a mapped source gives the item it produced."""
        if not self.task(task_id).is_mapped:
            return None
        states = self._states.setdefault(task_id, {})
        if index not in states:
            rows = self.conn.execute(
                select(TaskInstance.map_index, TaskInstance.state).where(
                    *self._where(task_id),
                    TaskInstance.map_index >= index,
                    TaskInstance.map_index < index + STATE_WINDOW,
                )
            )
            states.update({r.map_index: r.state for r in rows})
        return _ITEM_STATE.get(states.get(index) or TIS.SUCCESS)


def available(spec: StreamSpec, sources: Sources) -> Available:
    """How many items of ``spec`` exist now; closed once no more can come."""
    if spec.op == "literal":
        return Available(spec.length or 0, closed=True)
    if spec.op == "source":
        assert spec.task_id is not None
        return sources.available(spec.task_id, spec.key)
    parts = [available(a, sources) for a in spec.args]
    failed = any(p.failed for p in parts)
    error = next((p.error for p in parts if p.error), None)
    if spec.op in ("map", "filter"):
        return parts[0]
    if spec.op == "batched":
        n = spec.n or 1
        (part,) = parts
        length = -(-part.length // n) if part.closed else part.length // n
        return Available(length, part.closed, failed, error)
    if spec.op == "zip":
        shortest = min(p.length for p in parts)
        closed = any(p.closed and p.length == shortest for p in parts)
        return Available(shortest, closed, failed, error)
    # concat: an input's items are counted once every input before it has closed.
    length = 0
    for part in parts:
        length += part.length
        if not part.closed:
            return Available(length, False, failed, error)
    return Available(length, True, failed, error)


def item_state(spec: StreamSpec, index: int, sources: Sources) -> str | None:
    """The state instance ``index`` starts in: None (to run), skipped or upstream_failed."""
    if spec.op == "literal":
        return None
    if spec.op == "source":
        assert spec.task_id is not None
        return sources.item_state(spec.task_id, index)
    if spec.op in ("map", "filter"):
        return item_state(spec.args[0], index, sources)
    if spec.op == "zip":
        return max((item_state(a, index, sources) for a in spec.args), key=_WORST.__getitem__)
    if spec.op == "concat":
        for arg in spec.args[:-1]:
            n = available(arg, sources).length
            if index < n:
                return item_state(arg, index, sources)
            index -= n
        return item_state(spec.args[-1], index, sources)
    # batched: a batch runs if any of its items does; it is skipped if all were.
    n = spec.n or 1
    states = [item_state(spec.args[0], i, sources) for i in range(index * n, index * n + n)]
    if TIS.UPSTREAM_FAILED in states:
        return TIS.UPSTREAM_FAILED
    return TIS.SKIPPED if all(s == TIS.SKIPPED for s in states) else None


def consumed(spec: StreamSpec, done: int, sources: Sources) -> dict[str, int]:
    """Source items behind the first ``done`` items of ``spec``, per source task."""
    if spec.op == "literal":
        return {}
    if spec.op == "source":
        assert spec.task_id is not None
        return {spec.task_id: done}
    if spec.op == "batched":
        return consumed(spec.args[0], done * (spec.n or 1), sources)
    out: dict[str, int] = {}
    offset = 0
    for arg in spec.args:
        if spec.op == "concat":
            part = available(arg, sources).length
            share = max(0, min(done - offset, part))
            offset += part
        else:
            share = done
        for task_id, n in consumed(arg, share, sources).items():
            out[task_id] = min(out.get(task_id, n), n)
    return out


def _instances_of(run_id: int, task_id: str) -> tuple[ColumnElement[bool], ...]:
    return (TaskInstance.dag_run_id == run_id, TaskInstance.task_id == task_id)


def instance_count(conn: Connection, run_id: int, task_id: str) -> int:
    """Mapped instances created so far (indexes are dense: 0 .. count-1)."""
    top = conn.scalar(
        select(func.max(TaskInstance.map_index)).where(*_instances_of(run_id, task_id))
    )
    return 0 if top is None else int(top) + 1


def finished_prefix(conn: Connection, run_id: int, task_id: str, count: int | None = None) -> int:
    """How many instances, from index 0, have finished (a mapped task's progress)."""
    first = conn.scalar(
        select(func.min(TaskInstance.map_index)).where(
            *_instances_of(run_id, task_id), TaskInstance.map_index >= 0, _UNFINISHED
        )
    )
    if first is not None:
        return int(first)
    return instance_count(conn, run_id, task_id) if count is None else count


def _insert_series(
    run_id: int,
    dag_id: str,
    run_key: str,
    task: SerializedTask,
    start: int,
    stop: int,
    now: datetime,
) -> Insert:
    """``INSERT … SELECT`` of instances ``start <= map_index < stop``, the indexes counted
    by the database itself: no row is built in Python, however many there are."""
    seq = select(literal(start, BigInteger).label("i")).cte("seq", recursive=True)
    seq = seq.union_all(select(seq.c.i + 1).where(seq.c.i + 1 < stop))
    template = ti_row(run_id, dag_id, run_key, task, 0, now)
    columns = [c for c in template if c != "map_index"]
    return insert(TaskInstance).from_select(
        [*columns, "map_index"],
        select(
            *(literal(template[c], TaskInstance.__table__.c[c].type).label(c) for c in columns),
            seq.c.i,
        ),
    )


@dataclass(frozen=True)
class Expansion:
    created: int
    # More items are available than this pass's budget allowed: come back at once.
    more: bool
    # The placeholder finished (or went): the task's instance count is final.
    closed: bool


def expand_iterate(
    conn: Connection,
    run_id: int,
    run_key: str,
    dag: SerializedDag,
    placeholder_id: int,
    task: SerializedTask,
    now: datetime,
    budget: int,
    sources: Sources | None = None,
) -> Expansion:
    """Create the instances whose items exist, at most ``budget`` of them."""
    assert task.iterate is not None
    sources = sources or Sources(conn, run_id, dag.task)
    have = instance_count(conn, run_id, task.task_id)
    avail = available(task.iterate, sources)
    upto = min(avail.length, have + budget)
    if upto > have:
        if any(sources.task(t).is_mapped for t in task.iterate_sources):
            # Items from mapped tasks: a failed or skipped one finishes its instance at once.
            rows = []
            for i in range(have, upto):
                row = ti_row(run_id, dag.dag_id, run_key, task, i, now)
                state = item_state(task.iterate, i, sources)
                row.update(state=state, end_date=now if state is not None else None)
                rows.append(row)
            conn.execute(insert(TaskInstance), rows)
        else:
            conn.execute(_insert_series(run_id, dag.dag_id, run_key, task, have, upto, now))
    if not avail.closed or upto < avail.length:
        return Expansion(upto - have, more=upto < avail.length, closed=False)
    if avail.error is not None or avail.failed or upto == 0:
        if avail.error is not None:
            state, error = TIS.FAILED, f"cannot iterate task {task.task_id!r}: {avail.error}"
        elif avail.failed:
            state, error = TIS.UPSTREAM_FAILED, None
        else:
            state, error = TIS.SKIPPED, None  # an empty stream: like an empty mapping
        transitions.finish_placeholder(conn, placeholder_id, state, now, error=error)
    else:
        # Every item has its instance: the placeholder has done its job.
        conn.execute(delete(TaskInstance).where(TaskInstance.id == placeholder_id))
    return Expansion(upto - have, more=False, closed=True)


def downstream_room(
    conn: Connection,
    run_id: int,
    producer: SerializedTask,
    task: Callable[[str], SerializedTask],
) -> int | None:
    """How many more items the producer's stream may take before its iterate consumers
    catch up (None: nothing downstream iterates over it).

    Items not yet expanded or whose instances have not finished count against the
    producer's ``max_pending_events``: a slow consumer holds the stream, and with it the
    trigger (which pauses once that many of its events wait unconsumed).
    """
    consumers = [
        c
        for c in map(task, producer.downstream)
        if c.iterate is not None and producer.task_id in c.iterate_sources
    ]
    if not consumers:
        return None
    sources = Sources(conn, run_id, task)
    length = sources.available(producer.task_id, "return_value").length
    done = min(
        consumed(c.iterate, finished_prefix(conn, run_id, c.task_id), sources).get(
            producer.task_id, 0
        )
        for c in consumers
        if c.iterate is not None
    )
    return done + producer.max_pending_events - length
