"""Metrics recorded inside a database transaction count only once it commits.

The transition hook (ADR 0011) and the acknowledgement of stream events run inside the
transaction that changed the states; a transaction that rolls back (the scheduler then
applies the same reports again next step) must not count twice. So what they record
waits in the connection's ``info`` and is added when it commits, dropped when it rolls
back.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, event, select

from tailrace.clock import utcnow
from tailrace.db import forget_info
from tailrace.db.models import TaskInstance, TriggerEvent
from tailrace.metrics._instruments import Instruments
from tailrace.state import TaskInstanceState as TIS
from tailrace.transitions import Transition

_PENDING = "tailrace_metrics_after_commit"
_listening: weakref.WeakSet[Engine] = weakref.WeakSet()


def after_commit(conn: Connection, record: Callable[[], None]) -> None:
    """Call ``record`` once ``conn``'s transaction commits; never if it rolls back."""
    conn.info.setdefault(_PENDING, []).append(record)
    engine = conn.engine
    if engine not in _listening:
        _listening.add(engine)
        event.listen(engine, "commit", _committed)
        event.listen(engine, "rollback", _rolled_back)


def _committed(conn: Any) -> None:
    for record in conn.info.pop(_PENDING, ()):
        record()


def _rolled_back(conn: Any) -> None:
    # Not by asking an invalidated connection for its info: the rollback would never
    # complete, and the scheduler could not step again after a PostgreSQL restart.
    forget_info(conn, _PENDING)


# A try ended in these (up_for_retry: that try failed, another follows).
ENDED = frozenset(
    {TIS.SUCCESS, TIS.FAILED, TIS.UP_FOR_RETRY, TIS.SKIPPED, TIS.UPSTREAM_FAILED, TIS.REMOVED}
)
_FAILURES = frozenset({TIS.FAILED, TIS.UP_FOR_RETRY})
# Instance ids to (dag_id, task_id): they never change, so a cache may keep them.
_CACHE_LIMIT = 100_000


class TaskStateMetrics:
    """The transition hook: task instances that ended, by DAG, task and state."""

    def __init__(self, instruments: Instruments) -> None:
        self.instruments = instruments
        self._names: dict[int, tuple[str, str]] = {}

    def __call__(self, conn: Connection, transitions: Sequence[Transition]) -> None:
        ended = [t for t in transitions if t.state in ENDED]
        if not ended:
            return
        # Reports tell the names; instances finished otherwise (trigger rules) are read.
        names = self._lookup(conn, {t.ti_id for t in ended if not t.dag_id})
        counts: Counter[tuple[str, str, str]] = Counter(
            (
                *((t.dag_id, t.task_id) if t.dag_id else names.get(t.ti_id, ("", ""))),
                str(t.state),
            )
            for t in ended
        )
        after_commit(conn, lambda: self._count(counts))

    def _lookup(self, conn: Connection, ti_ids: set[int]) -> dict[int, tuple[str, str]]:
        missing = [i for i in ti_ids if i not in self._names]
        if missing:
            if len(self._names) + len(missing) > _CACHE_LIMIT:
                self._names.clear()
            rows = conn.execute(
                select(TaskInstance.id, TaskInstance.dag_id, TaskInstance.task_id).where(
                    TaskInstance.id.in_(missing)
                )
            )
            for ti_id, dag_id, task_id in rows:
                self._names[ti_id] = (dag_id, task_id)
        return self._names

    def _count(self, counts: Counter[tuple[str, str, str]]) -> None:
        m = self.instruments
        for (dag_id, task_id, state), n in counts.items():
            m.ti_finish.labels(dag_id, task_id, state).inc(n)
            if state == TIS.SUCCESS:
                m.ti_successes.inc(n)
            elif state in _FAILURES:
                m.ti_failures.inc(n)


def stream_acknowledged(
    m: Instruments, conn: Connection, trigger_id: int, after: int, upto: int
) -> None:
    """A consumer acknowledged its trigger's events ``after`` < index <= ``upto``: count
    them, and how long the oldest of them waited."""
    if upto <= after:
        return
    row = conn.execute(
        select(TaskInstance.dag_id, TaskInstance.task_id, TriggerEvent.created_at)
        .join(TaskInstance, TaskInstance.trigger_id == TriggerEvent.trigger_id)
        .where(TriggerEvent.trigger_id == trigger_id, TriggerEvent.sequence_index == after + 1)
        .limit(1)
    ).first()
    if row is None:
        return
    dag_id, task_id, created_at = row
    lag = max(0.0, (utcnow() - created_at).total_seconds())

    def record() -> None:
        m.stream_events_acknowledged.labels(dag_id, task_id).inc(upto - after)
        m.stream_event_ack_lag.labels(dag_id, task_id).observe(lag)

    after_commit(conn, record)
