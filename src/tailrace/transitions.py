"""The task-instance state machine: every change of a task instance's state is made here.

One function per transition. Each writes in the caller's transaction, applies only to the
try it was asked about (a stale report, a superseded try or an instance in another state
is left alone), and tells the registered transition hooks what changed, in that same
transaction, so what they record (callbacks to run, metrics, spans, asset events) commits
or rolls back with the state itself (ADR 0011).

Who calls what:

| transition | from → to | called by |
|---|---|---|
| `wait_for_slot` | none → scheduled | the scheduler's pass (no slot free) |
| `queue` | none/scheduled/up_for_retry → queued (a new try, unless resuming) | the pass |
| `start`, `start_one` | queued → running | reports (local executor, execution API) |
| `heartbeat` | running (last heartbeat) | the execution API |
| `defer` | queued/running → deferred | reports (a task raised TaskDeferred) |
| `handled` | running → deferred (more events to come) | reports |
| `resume` | deferred → scheduled (events or a timeout to hand over) | trigger consumption |
| `first_event_arrived` | deferred (deferral timeout off) | trigger consumption |
| `start_from_trigger` | none/scheduled → deferred (a new try) | the pass |
| `resume_stream_retry` | up_for_retry → deferred (a new try on the same stream) | the pass |
| `finish` | queued/running/deferred → success/failed/up_for_retry/skipped; assets | reports |
| `skip_unrun` | none/scheduled → skipped (a branch or short-circuit said so) | reports |
| `finish_unrun` | none/scheduled → skipped/upstream_failed/removed (trigger rules) | the pass |
| `finish_unstarted` | a mapped task's unstarted instances → skipped/upstream_failed | the pass |
| `finish_placeholder` | a mapped task's placeholder → failed/skipped/upstream_failed | expansion |
| `reset_orphan` | queued → none (its scheduler died; that try is over) | orphan checks |
| `spare_retry` | running (its worker was lost: the try's retry is given back) | orphan checks |
| `clear` | any → none (the try is superseded, retries restored) | `tailrace.dagrun` |
| `mark` | any → success/failed/skipped by hand | `tailrace.dagrun` |

DAG runs change state here too (`start_runs`, `finish_run`, `time_out_run`,
`requeue_run`, `cancel_queued_runs`), told to the run hooks (`register_run_hook`); a run
that finishes records its DAG callback in the same transaction
(`tailrace.store.dag_callbacks`), for a worker to run, and cancels its deadlines still
ahead (`tailrace.store.deadlines`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from sqlalchemy import (
    Connection,
    Integer,
    Row,
    bindparam,
    case,
    func,
    insert,
    or_,
    select,
    update,
)

from tailrace.db import forget_info
from tailrace.db.models import DagRun, TaskInstance, TaskInstanceHistory
from tailrace.state import FINISHED_TI_STATES, DagRunState
from tailrace.state import TaskInstanceState as TIS
from tailrace.store import dag_callbacks, deadlines
from tailrace.store.assets import NewAssetEvent, record_events

if TYPE_CHECKING:
    # Only its fields are read: the worker runtime is not imported where state changes.
    from tailrace.execution.protocol import TaskStarted

__all__ = [
    "RunTransition",
    "RunTransitionHook",
    "Transition",
    "TransitionHook",
    "batched",
    "cancel_queued_runs",
    "clear",
    "defer",
    "finish",
    "finish_placeholder",
    "finish_run",
    "finish_unrun",
    "finish_unstarted",
    "first_event_arrived",
    "handled",
    "heartbeat",
    "mark",
    "queue",
    "register_hook",
    "register_run_hook",
    "requeue_run",
    "reset_orphan",
    "resume",
    "resume_stream_retry",
    "skip_unrun",
    "spare_retry",
    "start",
    "start_from_trigger",
    "start_one",
    "start_runs",
    "time_out_run",
    "wait_for_slot",
]


class Transition(msgspec.Struct, frozen=True):
    """One task instance changed state: what the hooks are told."""

    kind: str
    ti_id: int
    # The state it is in now (None: cleared, waiting to be scheduled again).
    state: str | None
    at: datetime
    # The try it concerns, where the caller knows it.
    try_number: int | None = None
    error: str | None = None
    # The instance's DAG and task, where the caller knows them ("": look them up).
    dag_id: str = ""
    task_id: str = ""


class TransitionHook(Protocol):
    def __call__(self, conn: Connection, transitions: Sequence[Transition]) -> None: ...


_hooks: list[TransitionHook] = []


def register_hook(hook: TransitionHook) -> Callable[[], None]:
    """Call ``hook`` with every batch of transitions, inside the transaction that made
    them; returns the function that unregisters it."""
    _hooks.append(hook)
    return lambda: _hooks.remove(hook)


# Where a `batched` block collects its transitions, in the connection's info.
_PENDING = "tailrace.transitions.pending"


def _emit(conn: Connection, build: Callable[[], list[Transition]]) -> None:
    # Built only when someone listens: the hot path pays nothing without hooks. Built at
    # once (a builder may read back what just changed), told now or at the batch's end.
    if _hooks:
        transitions = build()
        pending: list[Transition] | None = conn.info.get(_PENDING)
        if pending is not None:
            pending.extend(transitions)
        elif transitions:
            _tell(conn, transitions)


def _tell(conn: Connection, transitions: list[Transition]) -> None:
    for hook in list(_hooks):
        hook(conn, transitions)


@contextlib.contextmanager
def batched(conn: Connection) -> Iterator[None]:
    """Tell the hooks of the block's transitions once, in one batch at its end (still in
    the transaction): a scheduler step queues, starts and finishes many instances, and a
    hook writing rows then writes them in one statement."""
    if _PENDING in conn.info:  # nested: the outer block tells
        yield
        return
    pending: list[Transition] = []
    conn.info[_PENDING] = pending
    try:
        yield
    finally:
        forget_info(conn, _PENDING)
    if pending:
        _tell(conn, pending)


# -- the scheduler's pass ---------------------------------------------------------------

_WAITING = or_(TaskInstance.state.is_(None), TaskInstance.state == TIS.SCHEDULED)
_QUEUEABLE = or_(_WAITING, TaskInstance.state == TIS.UP_FOR_RETRY)

_SET_SCHEDULED = (
    update(TaskInstance)
    .where(TaskInstance.id == bindparam("b_id"), _WAITING)
    .values(state=TIS.SCHEDULED, updated_at=bindparam("b_now"))
)
_SET_QUEUED = (
    update(TaskInstance)
    .where(TaskInstance.id == bindparam("b_id"), _QUEUEABLE)
    .values(
        state=TIS.QUEUED,
        # Resuming a deferred try continues it; anything else starts a new try.
        try_number=case(
            (TaskInstance.next_method.is_(None), TaskInstance.try_number + 1),
            else_=TaskInstance.try_number,
        ),
        queued_at=bindparam("b_now"),
        start_date=case((TaskInstance.next_method.is_(None), None), else_=TaskInstance.start_date),
        next_retry_at=None,
        queued_by_job_id=bindparam("b_job"),
        updated_at=bindparam("b_now"),
    )
)
_FINISH_UNRUN = (
    update(TaskInstance)
    .where(TaskInstance.id == bindparam("b_id"), _QUEUEABLE)
    .values(state=bindparam("b_state"), end_date=bindparam("b_now"), updated_at=bindparam("b_now"))
)
_FINISH_UNSTARTED = (
    update(TaskInstance)
    .where(
        TaskInstance.dag_run_id == bindparam("b_run"),
        TaskInstance.task_id == bindparam("b_task"),
        TaskInstance.map_index >= 0,
        TaskInstance.state.is_(None),
    )
    .values(state=bindparam("b_state"), end_date=bindparam("b_now"), updated_at=bindparam("b_now"))
)
_FINISH_UNSTARTED_IDS = _FINISH_UNSTARTED.returning(TaskInstance.id)


def wait_for_slot(conn: Connection, ti_ids: Sequence[int], now: datetime) -> None:
    """Ready, but no slot is free: scheduled until one is."""
    if not ti_ids:
        return
    conn.execute(_SET_SCHEDULED, [{"b_id": i, "b_now": now} for i in ti_ids])
    _emit(conn, lambda: [Transition("schedule", i, TIS.SCHEDULED, now) for i in ti_ids])


def queue(conn: Connection, ti_ids: Sequence[int], job_id: int, now: datetime) -> None:
    """Hand instances to the executor: a new try each (a resumed deferral keeps its try)."""
    if not ti_ids:
        return
    conn.execute(_SET_QUEUED, [{"b_id": i, "b_now": now, "b_job": job_id} for i in ti_ids])
    _emit(conn, lambda: [Transition("queue", i, TIS.QUEUED, now) for i in ti_ids])


def finish_unrun(conn: Connection, states: Mapping[int, str], now: datetime) -> None:
    """Trigger rules decided these will not run: skipped, upstream_failed or removed."""
    if not states:
        return
    conn.execute(
        _FINISH_UNRUN, [{"b_id": i, "b_state": s, "b_now": now} for i, s in states.items()]
    )
    _emit(conn, lambda: [Transition("finish_unrun", i, s, now) for i, s in states.items()])


def finish_unstarted(
    conn: Connection, dag_run_id: int, task_id: str, state: str, now: datetime
) -> None:
    """Every unstarted instance of a mapped task, in one statement (there may be millions)."""
    params = {"b_run": dag_run_id, "b_task": task_id, "b_state": state, "b_now": now}
    if not _hooks:
        conn.execute(_FINISH_UNSTARTED, params)
        return
    ids = list(conn.scalars(_FINISH_UNSTARTED_IDS, params))
    _emit(conn, lambda: [Transition("finish_unrun", i, state, now) for i in ids])


def finish_placeholder(
    conn: Connection, ti_id: int, state: str, now: datetime, error: str | None = None
) -> None:
    """A mapped task's placeholder ends the task: its expansion failed, or had no items."""
    conn.execute(
        update(TaskInstance)
        .where(TaskInstance.id == ti_id, _QUEUEABLE)
        .values(state=state, error=error, end_date=now, updated_at=now)
    )
    _emit(conn, lambda: [Transition("finish_unrun", ti_id, state, now, error=error)])


def start_from_trigger(
    conn: Connection,
    ti_id: int,
    *,
    trigger_id: int,
    next_method: str | None,
    next_kwargs: dict[str, Any] | None,
    trigger_timeout: datetime | None,
    now: datetime,
) -> None:
    """A new try that begins in the triggerer: deferred at once, no worker slot taken."""
    _new_deferred_try(
        conn,
        ti_id,
        _QUEUEABLE,
        now,
        start_date=now,
        trigger_id=trigger_id,
        next_method=next_method,
        next_kwargs=next_kwargs,
        trigger_timeout=trigger_timeout,
    )


def resume_stream_retry(conn: Connection, ti_id: int, now: datetime) -> int | None:
    """A stream consumer's next try, waiting on the same trigger run after the last ack;
    returns that trigger's id (None: the instance was not up for retry)."""
    return _new_deferred_try(
        conn, ti_id, TaskInstance.state == TIS.UP_FOR_RETRY, now, end_date=None, error=None
    )


def _new_deferred_try(
    conn: Connection, ti_id: int, from_states: Any, now: datetime, **values: Any
) -> int | None:
    """The new try, deferred; returns the trigger it waits on (None: no row changed)."""
    row = conn.execute(
        update(TaskInstance)
        .where(TaskInstance.id == ti_id, from_states)
        .values(
            state=TIS.DEFERRED,
            try_number=TaskInstance.try_number + 1,
            queued_at=now,
            next_retry_at=None,
            updated_at=now,
            **values,
        )
        .returning(TaskInstance.try_number, TaskInstance.trigger_id)
    ).first()
    if row is None:
        return None
    try_number = row.try_number
    _emit(conn, lambda: [Transition("defer", ti_id, TIS.DEFERRED, now, try_number)])
    return row.trigger_id  # type: ignore[no-any-return]


# -- reports from workers ----------------------------------------------------------------

_MARK_STARTED = (
    update(TaskInstance)
    .where(
        TaskInstance.id == bindparam("b_id"),
        TaskInstance.try_number == bindparam("b_try"),
        TaskInstance.state == TIS.QUEUED,
    )
    .values(
        state=TIS.RUNNING,
        # A resumed try keeps the start of its first stint: its duration spans the wait.
        start_date=func.coalesce(TaskInstance.start_date, bindparam("b_start")),
        hostname=bindparam("b_host"),
        pid=bindparam("b_pid"),
        worker_name=bindparam("b_worker"),
        updated_at=bindparam("b_start"),
    )
)


# One try's start says which instance it was (a remote try's log goes by it), and a
# remote try's start is its first heartbeat too, by the owner's clock.
_STARTED_IDENTITY = (
    TaskInstance.dag_id,
    TaskInstance.run_id,
    TaskInstance.task_id,
    TaskInstance.map_index,
)
_START_ONE = _MARK_STARTED.returning(*_STARTED_IDENTITY)
_START_ONE_BEATING = _MARK_STARTED.values(last_heartbeat_at=bindparam("b_beat")).returning(
    *_STARTED_IDENTITY
)


def _started(s: TaskStarted) -> dict[str, Any]:
    return {
        "b_id": s.ti_id,
        "b_try": s.try_number,
        "b_start": s.start_date,
        "b_host": s.hostname,
        "b_pid": s.pid,
        "b_worker": s.worker,
    }


def _started_transitions(conn: Connection, started: Sequence[TaskStarted]) -> list[Transition]:
    # An executemany reports no per-row counts: read back which tries are running now.
    tries = {s.ti_id: s for s in started}
    running = conn.execute(
        select(TaskInstance.id, TaskInstance.try_number).where(
            TaskInstance.id.in_(tries), TaskInstance.state == TIS.RUNNING
        )
    )
    return [
        _started_transition(tries[r.id]) for r in running if tries[r.id].try_number == r.try_number
    ]


def _started_transition(s: TaskStarted) -> Transition:
    return Transition("start", s.ti_id, TIS.RUNNING, s.start_date, s.try_number)


def start(conn: Connection, started: Sequence[TaskStarted]) -> None:
    """Queued tries their workers began: running."""
    if not started:
        return
    marked = conn.execute(_MARK_STARTED, [_started(s) for s in started]).rowcount
    if marked == len(started) and conn.dialect.supports_sane_multi_rowcount:
        # Every try started (the usual case): no need to read back which did.
        _emit(conn, lambda: [_started_transition(s) for s in started])
    else:
        _emit(conn, lambda: _started_transitions(conn, started))


def start_one(
    conn: Connection, started: TaskStarted, *, heartbeat: datetime | None = None
) -> Row[str, str, str, int] | None:
    """Like `start` for one try (``heartbeat``: when its worker was last heard of, as
    `heartbeat` writes it): the instance's dag_id, run_id, task_id and map_index, or None
    if it is not the instance's queued try."""
    if heartbeat is None:
        row = conn.execute(_START_ONE, _started(started)).first()
    else:
        row = conn.execute(_START_ONE_BEATING, {**_started(started), "b_beat": heartbeat}).first()
    if row is None:
        return None
    _emit(conn, lambda: [_started_transition(started)])
    return row


def heartbeat(conn: Connection, ti_id: int, try_number: int, now: datetime) -> bool:
    """The try's worker is alive; False if that try is not the one running."""
    beat = conn.execute(
        update(TaskInstance)
        .where(
            TaskInstance.id == ti_id,
            TaskInstance.try_number == try_number,
            TaskInstance.state == TIS.RUNNING,
        )
        .values(last_heartbeat_at=now)
    )
    return beat.rowcount == 1


# A report applies to an instance its try is still in: queued or running on a worker, or
# deferred (a trigger may end the task directly, or its deferral may time out).
ACCEPTING_REPORTS = (TIS.QUEUED, TIS.RUNNING, TIS.DEFERRED)
# Spelled out, not IN (…): an expanding IN cannot take part in an executemany.
_ACCEPTING = or_(*(TaskInstance.state == s for s in ACCEPTING_REPORTS))


def _current(ti_id: int, try_number: int) -> Any:
    return (
        TaskInstance.id == ti_id,
        TaskInstance.try_number == try_number,
        _ACCEPTING,
    )


def defer(
    conn: Connection,
    ti_id: int,
    try_number: int,
    *,
    trigger_id: int,
    next_method: str,
    next_kwargs: dict[str, Any] | None,
    trigger_timeout: datetime | None,
    start_date: datetime | None,
    now: datetime,
) -> bool:
    """The try hands its waiting to a trigger; False if the try is not current."""
    deferred = conn.execute(
        update(TaskInstance)
        .where(*_current(ti_id, try_number))
        .values(
            state=TIS.DEFERRED,
            trigger_id=trigger_id,
            next_method=next_method,
            next_kwargs=next_kwargs,
            trigger_timeout=trigger_timeout,
            start_date=func.coalesce(TaskInstance.start_date, start_date),
            updated_at=now,
        )
    )
    if deferred.rowcount != 1:
        return False
    _emit(conn, lambda: [Transition("defer", ti_id, TIS.DEFERRED, now, try_number)])
    return True


def handled(conn: Connection, ti_id: int, try_number: int, now: datetime) -> None:
    """A consumer handled a batch of events and waits for the next one."""
    conn.execute(
        update(TaskInstance)
        .where(*_current(ti_id, try_number))
        .values(state=TIS.DEFERRED, updated_at=now)
    )
    _emit(conn, lambda: [Transition("defer", ti_id, TIS.DEFERRED, now, try_number)])


def resume(conn: Connection, ti_id: int, now: datetime) -> None:
    """Events (or a timeout) wait for the deferred try: schedule it to run them."""
    conn.execute(
        update(TaskInstance)
        .where(TaskInstance.id == ti_id, TaskInstance.state == TIS.DEFERRED)
        .values(state=TIS.SCHEDULED, trigger_timeout=None, updated_at=now)
    )
    _emit(conn, lambda: [Transition("resume", ti_id, TIS.SCHEDULED, now)])


def first_event_arrived(conn: Connection, ti_id: int) -> None:
    """A deferral timeout bounds the wait for the first event only."""
    conn.execute(
        update(TaskInstance)
        .where(TaskInstance.id == ti_id, TaskInstance.trigger_timeout.is_not(None))
        .values(trigger_timeout=None)
    )


class Outcome(msgspec.Struct, frozen=True):
    """How a try ended, as `finish` writes it."""

    ti_id: int
    try_number: int
    state: str
    start_date: datetime
    end_date: datetime
    error: str | None = None
    next_retry_at: datetime | None = None
    rendered_map_index: str | None = None
    # A retry that resumes a stream keeps what it resumes with (ADR 0005).
    keep_deferral: bool = False
    # What the try's success emits for its outlets (recorded only if it succeeded).
    asset_events: tuple[NewAssetEvent, ...] = ()
    # The instance's DAG and task, told to the hooks (who would otherwise read them).
    dag_id: str = ""
    task_id: str = ""
    # No worker ran the task's callback for this end (its kind: failure, retry, success,
    # skipped): one is recorded for a worker to run (ADR 0033).
    callback: str | None = None
    dag_run_id: int = 0
    # The try's start, when its report came with the end (the instance is still queued):
    # written by the same UPDATE, and told to the hooks before the end.
    started: TaskStarted | None = None
    # Its retries given back (a batch that failed every try went to the dead letters and
    # the next batch starts afresh): the new max_tries. None leaves them as they are.
    max_tries: int | None = None

    @property
    def duration(self) -> float:
        return (self.end_date - self.start_date).total_seconds()


_FINISH = (
    update(TaskInstance)
    .where(
        TaskInstance.id == bindparam("b_id"),
        TaskInstance.try_number == bindparam("b_try"),
        _ACCEPTING,
    )
    .values(
        state=bindparam("b_state"),
        start_date=bindparam("b_start"),
        end_date=bindparam("b_end"),
        duration=bindparam("b_duration"),
        error=bindparam("b_error"),
        next_retry_at=bindparam("b_retry"),
        rendered_map_index=bindparam("b_rendered"),
        max_tries=func.coalesce(bindparam("b_max_tries", type_=Integer), TaskInstance.max_tries),
        next_method=case((bindparam("b_keep"), TaskInstance.next_method), else_=None),
        next_kwargs=case((bindparam("b_keep"), TaskInstance.next_kwargs), else_=None),
        trigger_timeout=None,
        updated_at=bindparam("b_end"),
    )
)
# A try whose start is reported with its end: the worker `start` records, in the same UPDATE.
_START_AND_FINISH = _FINISH.values(
    hostname=bindparam("b_host"), pid=bindparam("b_pid"), worker_name=bindparam("b_worker")
)


def _finish_params(o: Outcome) -> dict[str, Any]:
    params = {
        "b_id": o.ti_id,
        "b_try": o.try_number,
        "b_state": o.state,
        "b_start": o.start_date,
        "b_end": o.end_date,
        "b_duration": o.duration,
        "b_error": o.error,
        "b_retry": o.next_retry_at,
        "b_rendered": o.rendered_map_index,
        "b_keep": o.keep_deferral,
        "b_max_tries": o.max_tries,
    }
    if o.started is not None:
        params.update(b_host=o.started.hostname, b_pid=o.started.pid, b_worker=o.started.worker)
    return params


def finish(conn: Connection, outcomes: Sequence[Outcome]) -> int:
    """Tries that ended, with their history rows, and the asset events of those that
    succeeded (queued for the DAGs they schedule). The caller read each instance (locked)
    in this transaction and passes only tries that are current. Returns how many asset
    events were written."""
    if not outcomes:
        return 0
    for statement, batch in (
        (_FINISH, [o for o in outcomes if o.started is None]),
        (_START_AND_FINISH, [o for o in outcomes if o.started is not None]),
    ):
        if batch:
            conn.execute(statement, [_finish_params(o) for o in batch])
    conn.execute(
        insert(TaskInstanceHistory),
        [
            {
                "task_instance_id": o.ti_id,
                "try_number": o.try_number,
                "state": TIS.FAILED if o.state == TIS.UP_FOR_RETRY else o.state,
                "start_date": o.start_date,
                "end_date": o.end_date,
                "duration": o.duration,
                "error": o.error,
            }
            for o in outcomes
        ],
    )
    _emit(
        conn,
        lambda: [
            *(_started_transition(o.started) for o in outcomes if o.started is not None),
            *(
                Transition(
                    "finish",
                    o.ti_id,
                    o.state,
                    o.end_date,
                    o.try_number,
                    o.error,
                    o.dag_id,
                    o.task_id,
                )
                for o in outcomes
            ),
        ],
    )
    for o in outcomes:
        if o.callback is not None:
            dag_callbacks.record_task(
                conn, o.dag_run_id, o.ti_id, o.try_number, o.callback, o.error, o.end_date
            )
    emitted = [e for o in outcomes if o.state == TIS.SUCCESS for e in o.asset_events]
    return len(record_events(conn, emitted, outcomes[0].end_date)) if emitted else 0


_SKIP = (
    update(TaskInstance)
    .where(
        TaskInstance.dag_run_id == bindparam("b_run"),
        TaskInstance.task_id == bindparam("b_task"),
        _WAITING,
    )
    .values(state=TIS.SKIPPED, end_date=bindparam("b_now"), updated_at=bindparam("b_now"))
)
_SKIP_IDS = _SKIP.returning(TaskInstance.id)


def skip_unrun(conn: Connection, tasks: Collection[tuple[int, str]], now: datetime) -> None:
    """Tasks a finished try said to skip (a branch not taken), in (run, task id) pairs."""
    if not tasks:
        return
    params = [{"b_run": r, "b_task": t, "b_now": now} for r, t in tasks]
    if not _hooks:
        conn.execute(_SKIP, params)
        return
    ids = [i for p in params for i in conn.scalars(_SKIP_IDS, p)]
    _emit(conn, lambda: [Transition("skip", i, TIS.SKIPPED, now) for i in ids])


# -- lost workers ------------------------------------------------------------------------


def reset_orphan(conn: Connection, ti_id: int, now: datetime, reason: str) -> None:
    """A queued try whose scheduler died before its start was heard of: it may have begun
    on a worker that died with it. That try is over — recorded in history with ``reason``,
    its log kept — and the instance waits to be scheduled again as a new try, which costs
    no retry (the loss was the infrastructure's). A queued *resumption* of a deferred try
    goes back to waiting as the same try: its events were not acknowledged, so they are
    handed over again."""
    row = conn.execute(
        select(TaskInstance.try_number, TaskInstance.next_method, TaskInstance.queued_at).where(
            TaskInstance.id == ti_id, TaskInstance.state == TIS.QUEUED
        )
    ).first()
    if row is None:
        return
    lost = row.next_method is None
    conn.execute(
        update(TaskInstance)
        .where(TaskInstance.id == ti_id, TaskInstance.state == TIS.QUEUED)
        .values(
            state=None,
            max_tries=TaskInstance.max_tries + (1 if lost else 0),
            queued_by_job_id=None,
            updated_at=now,
        )
    )
    if lost:
        conn.execute(
            insert(TaskInstanceHistory).values(
                task_instance_id=ti_id,
                try_number=row.try_number,
                state=TIS.FAILED,
                start_date=row.queued_at,
                end_date=now,
                duration=(now - row.queued_at).total_seconds() if row.queued_at else None,
                error=reason,
            )
        )
    _emit(conn, lambda: [Transition("orphan", ti_id, None, now, row.try_number, reason)])


def spare_retry(
    conn: Connection, tries: Sequence[tuple[int, int]], requeues: int, now: datetime
) -> set[int]:
    """Running tries (instance id, try number) lost with their worker: the loss was the
    infrastructure's, so each instance gets the retry back — and the caller fails the try
    with no retry delay — at most ``requeues`` times per instance (``lost_tries``); past
    that, or with ``requeues`` 0, the loss is an ordinary failure. Returns the instances
    spared. Locks their rows: a report of the same try waits, then finds it over."""
    spared: set[int] = set()
    if requeues <= 0:
        return spared
    for ti_id, try_number in tries:
        row = conn.execute(
            update(TaskInstance)
            .where(
                TaskInstance.id == ti_id,
                TaskInstance.try_number == try_number,
                TaskInstance.state == TIS.RUNNING,
                TaskInstance.lost_tries < requeues,
            )
            .values(
                max_tries=TaskInstance.max_tries + 1,
                lost_tries=TaskInstance.lost_tries + 1,
                updated_at=now,
            )
            .returning(TaskInstance.id)
        ).first()
        if row is not None:
            spared.add(ti_id)
    _emit(
        conn,
        lambda: [Transition("spare_retry", i, TIS.RUNNING, now) for i in sorted(spared)],
    )
    return spared


# -- a person's overrides ----------------------------------------------------------------

_NO_DEFERRAL: dict[str, Any] = {"next_method": None, "next_kwargs": None, "trigger_timeout": None}


class Cleared(msgspec.Struct, frozen=True):
    ti_id: int
    # Tries so far plus the task's retries: a cleared instance gets all its retries again.
    max_tries: int


def clear(conn: Connection, cleared: Sequence[Cleared], now: datetime) -> None:
    """Run these instances again; a try still running finishes, but its report no longer
    applies (its try number is superseded by the next queue)."""
    if not cleared:
        return
    conn.execute(
        update(TaskInstance)
        .where(TaskInstance.id == bindparam("b_id"))
        .values(
            state=None,
            max_tries=bindparam("b_max_tries"),
            lost_tries=0,
            trigger_id=None,
            next_retry_at=None,
            end_date=None,
            error=None,
            updated_at=now,
            **_NO_DEFERRAL,
        ),
        [{"b_id": c.ti_id, "b_max_tries": c.max_tries} for c in cleared],
    )
    _emit(conn, lambda: [Transition("clear", c.ti_id, None, now) for c in cleared])


MARKABLE = (TIS.SUCCESS, TIS.FAILED, TIS.SKIPPED)


def mark(conn: Connection, ti_ids: Sequence[int], state: str, now: datetime) -> None:
    """Set instances to success, failed or skipped by hand."""
    if state not in MARKABLE:
        raise ValueError(f"can only mark success, failed or skipped, not {state!r}")
    if not ti_ids:
        return
    conn.execute(
        update(TaskInstance)
        .where(TaskInstance.id.in_(ti_ids))
        .values(state=state, end_date=now, updated_at=now, **_NO_DEFERRAL)
    )
    _emit(conn, lambda: [Transition("mark", i, state, now) for i in ti_ids])


# -- DAG runs ----------------------------------------------------------------------------


class RunTransition(msgspec.Struct, frozen=True):
    """One DAG run changed state: what the run hooks are told."""

    kind: str  # start | finish | requeue | cancel
    dag_run_id: int
    state: str
    at: datetime
    # Why a run finished: Airflow's DAG callback reason (success, task_failure, timed_out).
    reason: str | None = None


class RunTransitionHook(Protocol):
    def __call__(self, conn: Connection, transitions: Sequence[RunTransition]) -> None: ...


_run_hooks: list[RunTransitionHook] = []


def register_run_hook(hook: RunTransitionHook) -> Callable[[], None]:
    """Call ``hook`` with every batch of run transitions, inside their transaction."""
    _run_hooks.append(hook)
    return lambda: _run_hooks.remove(hook)


def _emit_runs(conn: Connection, transitions: list[RunTransition]) -> None:
    for hook in list(_run_hooks):
        hook(conn, transitions)


def start_runs(conn: Connection, run_ids: Collection[int], now: datetime) -> None:
    """Queued runs begin: running."""
    if not run_ids:
        return
    conn.execute(
        update(DagRun)
        .where(DagRun.id.in_(list(run_ids)), DagRun.state == DagRunState.QUEUED)
        .values(state=DagRunState.RUNNING, start_date=now)
    )
    if _run_hooks:
        _emit_runs(conn, [RunTransition("start", i, DagRunState.RUNNING, now) for i in run_ids])


# The reason a DAG callback is given, as in Airflow.
_REASON = {DagRunState.SUCCESS: "success", DagRunState.FAILED: "task_failure"}


def finish_run(
    conn: Connection,
    dag_run_id: int,
    state: DagRunState,
    now: datetime,
    *,
    callback: bool,
    reason: str | None = None,
    has_deadlines: bool = True,
) -> bool:
    """A running run ends (its leaves decided, or it timed out); with ``callback`` (its
    DAG has the callback of that state) the callback is recorded for a worker to run;
    its deadlines still ahead are cancelled (``has_deadlines=False``: it was made with none).
    False if the run was not running."""
    reason = reason or _REASON[state]
    done = conn.execute(
        update(DagRun)
        .where(DagRun.id == dag_run_id, DagRun.state == DagRunState.RUNNING)
        .values(state=state, end_date=now)
    )
    if done.rowcount != 1:
        return False
    if has_deadlines:
        deadlines.cancel(conn, [dag_run_id], now)
    if callback:
        kind = "success" if state == DagRunState.SUCCESS else "failure"
        dag_callbacks.record(conn, dag_run_id, kind, reason, now)
    if _run_hooks:
        _emit_runs(conn, [RunTransition("finish", dag_run_id, state, now, reason)])
    return True


_UNFINISHED = TaskInstance.state.is_(None) | TaskInstance.state.not_in(sorted(FINISHED_TI_STATES))


def time_out_run(
    conn: Connection, dag_run_id: int, now: datetime, *, callback: bool
) -> list[tuple[int, int | None]]:
    """The run exceeded its DAG's ``dagrun_timeout``: failed, and its unfinished task
    instances skipped, as Airflow does (a try still running has its report refused, as
    after a mark). Returns the skipped instances' (id, trigger id) pairs: the caller stops
    their workers and cancels their triggers."""
    if not finish_run(
        conn, dag_run_id, DagRunState.FAILED, now, callback=callback, reason="timed_out"
    ):
        return []
    rows = conn.execute(
        select(TaskInstance.id, TaskInstance.state, TaskInstance.trigger_id).where(
            TaskInstance.dag_run_id == dag_run_id, _UNFINISHED
        )
    ).all()
    if rows:
        conn.execute(
            update(TaskInstance)
            .where(TaskInstance.dag_run_id == dag_run_id, _UNFINISHED)
            .values(state=TIS.SKIPPED, end_date=now, updated_at=now, **_NO_DEFERRAL)
        )
        _emit(conn, lambda: [Transition("timeout", r.id, TIS.SKIPPED, now) for r in rows])
    return [(r.id, r.trigger_id if r.state == TIS.DEFERRED else None) for r in rows]


def requeue_run(conn: Connection, dag_run_id: int, now: datetime) -> None:
    """Instances of the run were cleared: it is queued to run again."""
    conn.execute(
        update(DagRun)
        .where(DagRun.id == dag_run_id)
        .values(state=DagRunState.QUEUED, end_date=None, queued_at=now)
    )
    if _run_hooks:
        _emit_runs(conn, [RunTransition("requeue", dag_run_id, DagRunState.QUEUED, now)])


def cancel_queued_runs(conn: Connection, run_ids: Collection[int], now: datetime) -> list[int]:
    """Queued runs that will not start (their backfill was cancelled): failed, as Airflow
    does, their task instances left unrun and no DAG callback. Returns those it failed."""
    if not run_ids:
        return []
    failed = list(
        conn.scalars(
            update(DagRun)
            .where(DagRun.id.in_(list(run_ids)), DagRun.state == DagRunState.QUEUED)
            .values(state=DagRunState.FAILED, end_date=now)
            .returning(DagRun.id)
        )
    )
    deadlines.cancel(conn, failed, now)
    if _run_hooks and failed:
        _emit_runs(conn, [RunTransition("cancel", i, DagRunState.FAILED, now) for i in failed])
    return failed
