"""`tailrace db clean`: remove what finished before a moment, in short batches.

Airflow's command, table by table (ADR 0023). Only what is finished goes — a run that is
queued or running, a trigger an instance still reads, a job that still heartbeats are
never touched — so it is safe while everything runs. Each transaction deletes at most
``batch`` rows: PostgreSQL holds no lock for long and SQLite's other writers (the
scheduler, the triggerer) wait at most one batch. Children go before their parents, so no
cascade ever deletes an unbounded number of rows in one statement.

Other tables join through :func:`register_table` (the asset events of a later issue, say):
a name, what it holds, and a function that deletes one batch.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, and_, delete, exists, func, or_, select, tuple_, update

from tailrace.db import is_sqlite
from tailrace.db.engine import WRITE_POLL_OPTION
from tailrace.db.models import (
    DagRun,
    DeadLetter,
    Deadline,
    ImportError_,
    Job,
    Stream,
    StreamItem,
    TaskInstance,
    TaskInstanceHistory,
    Trigger,
    TriggerDedup,
    TriggerEvent,
    XCom,
)
from tailrace.execution import log_path_for
from tailrace.sdk.errors import TailraceError
from tailrace.state import FINISHED_TI_STATES, DagRunState
from tailrace.streams import DELETE_BATCH

# A job whose heartbeat is this old is dead whatever its state says (every component
# heartbeats every few seconds), so its row may go.
JOB_DEAD_AFTER = timedelta(minutes=10)
# Free pages returned to the file system per transaction (4 MiB of 4 KiB pages).
VACUUM_PAGES = 1000
# A transaction of `db clean` holds SQLite's write lock about this long, then steps
# aside: a scheduler pass of a few writes waits for at most a few of these.
BATCH_SECONDS = 0.025
# Longer than the write gate's slowest poll across processes (5 ms): a writer waiting in
# another process sees the lock free at least once between two batches.
MIN_PAUSE_SECONDS = 0.006
MIN_ROWS, MAX_ROWS = 500, 50_000
CLEAN_POLL_SECONDS = 0.0005
# Runs (or streams, or triggers) looked at per page, by primary key.
RUN_PAGE = 200
_FINISHED_RUNS = (DagRunState.SUCCESS, DagRunState.FAILED)
_USING = (
    "deferred",
    "scheduled",
    "queued",
    "running",
    "up_for_retry",
)


class CleanError(TailraceError):
    """``db clean`` was asked something it will not do."""


@dataclass
class Context:
    """What one clean is about: the moment, the batch size, where logs live."""

    before: datetime
    now: datetime
    batch: int
    log_folder: Path | None
    dry_run: bool
    on_batch: Callable[[str, int], None] = lambda table, rows: None
    log_files: int = 0
    # Rows deleted per table, whichever table's cleaning deleted them (a run's items count
    # as stream items).
    deleted: dict[str, int] = field(default_factory=dict)
    # Stream items, events, dedup records per transaction: small rows deleted by primary-
    # key range, as many as fit in about BATCH_SECONDS (adjusted after each batch).
    rows: int = 5000
    pause: Callable[[float], None] = time.sleep

    def count(self, table: str, rows: int) -> None:
        if rows > 0:
            self.deleted[table] = self.deleted.get(table, 0) + rows
            self.on_batch(table, rows)

    def pace(self, held: float) -> None:
        """After a transaction that held the write lock ``held`` seconds: size the next
        to about BATCH_SECONDS, and step aside, so that a scheduler or triggerer waiting
        in another process (whose turns across processes are polled, not queued) gets
        its turn before the next batch."""
        if held > BATCH_SECONDS:
            self.rows = max(MIN_ROWS, self.rows // 2)
        elif held < BATCH_SECONDS / 2:
            self.rows = min(MAX_ROWS, self.rows * 2)
        self.pause(MIN_PAUSE_SECONDS)


# Deletes one batch of the table's rows older than ctx.before (returns how many went), or
# with dry_run counts them all (and deletes nothing).
Cleaner = Callable[[Engine, Context], int]


@dataclass(frozen=True)
class Table:
    name: str
    holds: str
    clean: Cleaner
    # Tables whose rows go with this one's (a run's instances go with the run).
    implies: tuple[str, ...] = ()


_TABLES: dict[str, Table] = {}


def register_table(table: Table) -> None:
    """Add a table to ``db clean`` (and to the names ``--tables`` accepts)."""
    _TABLES[table.name] = table


def table_names() -> list[str]:
    return list(_TABLES)


def describe_table(name: str) -> str:
    return _TABLES[name].holds


@dataclass
class Result:
    table: str
    rows: int
    seconds: float
    dry_run: bool


@dataclass
class Report:
    before: datetime
    dry_run: bool
    results: list[Result] = field(default_factory=list)
    log_files: int = 0
    freed_bytes: int | None = None
    vacuum: str = ""
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "clean_before_timestamp": self.before.isoformat(),
            "dry_run": self.dry_run,
            "tables": [
                {"table": r.table, "rows": r.rows, "seconds": round(r.seconds, 3)}
                for r in self.results
            ],
            "log_files": self.log_files,
            "freed_bytes": self.freed_bytes,
            "vacuum": self.vacuum,
            "seconds": round(self.seconds, 3),
        }


def check_tables(names: Sequence[str] | None) -> list[str]:
    """The tables to clean, in dependency order; an unknown name is a CleanError."""
    if not names:
        return table_names()
    unknown = [n for n in names if n not in _TABLES]
    if unknown:
        raise CleanError(
            f"unknown table{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: "
            f"db clean knows {', '.join(table_names())}"
        )
    return [n for n in table_names() if n in names]


def clean(
    engine: Engine,
    before: datetime,
    *,
    now: datetime,
    tables: Sequence[str] | None = None,
    dry_run: bool = False,
    log_folder: Path | None = None,
    batch: int = DELETE_BATCH,
    on_batch: Callable[[str, int], None] = lambda table, rows: None,
) -> Report:
    """Delete (or, with ``dry_run``, count) what finished before ``before``."""
    if before > now:
        raise CleanError(
            f"--clean-before-timestamp {before.isoformat()} is in the future (now is "
            f"{now.isoformat()}): it would remove runs the moment they finish. Pass a "
            "moment in the past."
        )
    # It steps aside between batches: when it asks again, it asks often (engine.py).
    engine = engine.execution_options(**{WRITE_POLL_OPTION: CLEAN_POLL_SECONDS})
    ctx = Context(before, now, batch, log_folder, dry_run, on_batch)
    report = Report(before, dry_run)
    started = time.perf_counter()
    size_before = _sqlite_size(engine)
    for name in check_tables(tables):
        table = _TABLES[name]
        began = time.perf_counter()
        total = 0
        while True:
            rows = table.clean(engine, ctx)  # < 0: a batch of rows this table depends on
            if dry_run or rows == 0:
                total += rows
                break
        seconds = time.perf_counter() - began
        rows_of = total if dry_run else ctx.deleted.get(name, 0)
        report.results.append(Result(name, rows_of, seconds, dry_run))
    if not dry_run:
        # Rows of a table cleaned before it came up (a run's instances) count there too.
        for result in report.results:
            result.rows = ctx.deleted.get(result.table, 0)
    report.log_files = ctx.log_files
    if not dry_run and is_sqlite(engine):
        report.vacuum = _incremental_vacuum(engine, ctx, VACUUM_PAGES)
        after = _sqlite_size(engine)
        if size_before is not None and after is not None:
            report.freed_bytes = max(size_before - after, 0)
    report.seconds = time.perf_counter() - started
    return report


# -- runs and what hangs off them -------------------------------------------------------


def _old_runs(ctx: Context) -> Any:
    return select(DagRun.id).where(_old_run(ctx))


def _old_run(ctx: Context) -> Any:
    return and_(DagRun.state.in_(_FINISHED_RUNS), DagRun.end_date < ctx.before)


def _old_instances(ctx: Context) -> Any:
    """Finished instances, ended before the moment, of runs that are finished too."""
    return and_(
        TaskInstance.dag_run_id.in_(_old_runs(ctx)),
        TaskInstance.state.in_(list(FINISHED_TI_STATES)),
        or_(TaskInstance.end_date < ctx.before, TaskInstance.end_date.is_(None)),
    )


def _count(engine: Engine, q: Any) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(q.subquery())) or 0)


@contextmanager
def _batch(engine: Engine, ctx: Context) -> Iterator[Connection]:
    """One short write transaction, then a pause as long as it held the write lock."""
    with engine.begin() as conn:
        began = time.perf_counter()  # the lock is held from here (BEGIN IMMEDIATE)
        yield conn
    ctx.pace(time.perf_counter() - began)


def _delete_ranges(engine: Engine, ctx: Context, rows: Any, parents: Sequence[int]) -> None:
    """Every row of ``rows`` (stream items by stream, events or dedup records by trigger)
    whose parent is in ``parents``: a run of primary keys at a time — (parent, lowest) to
    (parent, lowest + n) — at most ``ctx.rows`` per transaction."""
    parent, order = rows.parent, rows.order
    pending = sorted(set(parents), reverse=True)
    while pending:
        with _batch(engine, ctx) as conn:
            left = ctx.rows
            while pending and left > 0:
                lowest = conn.scalar(select(func.min(order)).where(parent == pending[-1]))
                if lowest is None:
                    pending.pop()
                    continue
                gone = conn.execute(
                    delete(order.table).where(parent == pending[-1], order < lowest + left)
                ).rowcount
                ctx.count(rows.name, gone)
                left -= gone


@dataclass(frozen=True)
class _Rows:
    name: str  # the table, as the report counts it
    parent: Any
    order: Any


_ITEMS = _Rows("stream_item", StreamItem.stream_id, StreamItem.index)
_EVENTS = _Rows("trigger_event", TriggerEvent.trigger_id, TriggerEvent.sequence_index)
_DEDUP = _Rows("trigger_dedup", TriggerDedup.trigger_id, TriggerDedup.sequence_index)


def _instances(engine: Engine, ctx: Context, which: Any) -> int:
    """One page of task instances matching ``which`` with everything of theirs: their
    stream items and events first (batched on their own), then the rest, and log files."""
    with engine.connect() as conn:
        ids = list(
            conn.scalars(
                select(TaskInstance.id).where(which).order_by(TaskInstance.id).limit(ctx.batch)
            )
        )
        if not ids:
            return 0
        streams = list(conn.scalars(select(Stream.id).where(Stream.task_instance_id.in_(ids))))
        triggers = [
            t
            for t in conn.scalars(
                select(TaskInstance.trigger_id).where(
                    TaskInstance.id.in_(ids), TaskInstance.trigger_id.is_not(None)
                )
            )
            if t is not None
        ]
    _delete_ranges(engine, ctx, _ITEMS, streams)
    _delete_ranges(engine, ctx, _EVENTS, triggers)
    _delete_ranges(engine, ctx, _DEDUP, triggers)
    with _batch(engine, ctx) as conn:
        # Looked at again under the lock: one cleared meanwhile stays.
        rows = conn.execute(
            select(
                TaskInstance.id,
                TaskInstance.dag_run_id,
                TaskInstance.dag_id,
                TaskInstance.run_id,
                TaskInstance.task_id,
                TaskInstance.map_index,
                TaskInstance.try_number,
                TaskInstance.trigger_id,
            ).where(TaskInstance.id.in_(ids), which)
        ).all()
        ids = [r.id for r in rows]
        trigger_ids = [r.trigger_id for r in rows if r.trigger_id is not None]
        conn.execute(delete(Stream).where(Stream.task_instance_id.in_(ids)))
        tries = conn.execute(
            delete(TaskInstanceHistory).where(TaskInstanceHistory.task_instance_id.in_(ids))
        )
        ctx.count("task_instance_history", tries.rowcount)
        letters = conn.execute(delete(DeadLetter).where(DeadLetter.task_instance_id.in_(ids)))
        ctx.count("dead_letter", letters.rowcount)
        if rows:
            gone = conn.execute(
                delete(XCom).where(
                    tuple_(XCom.dag_run_id, XCom.task_id, XCom.map_index).in_(
                        [(r.dag_run_id, r.task_id, r.map_index) for r in rows]
                    )
                )
            )
            ctx.count("xcom", gone.rowcount)
        conn.execute(delete(TaskInstance).where(TaskInstance.id.in_(ids)))
        ctx.count("task_instance", len(ids))
        if trigger_ids:
            conn.execute(delete(Trigger).where(Trigger.id.in_(trigger_ids)))
            ctx.count("trigger", len(trigger_ids))
    _remove_logs(ctx, rows)
    return max(len(rows), 1)  # none gone (all cleared meanwhile): the caller looks again


def _remove_logs(ctx: Context, rows: Sequence[Any]) -> None:
    if ctx.log_folder is None:
        return
    for r in rows:
        for attempt in range(1, max(r.try_number, 1) + 1):
            path = log_path_for(ctx.log_folder, r.dag_id, r.run_id, r.task_id, r.map_index, attempt)
            if path.exists():
                path.unlink()
                ctx.log_files += 1


def _clean_runs(engine: Engine, ctx: Context) -> int:
    if ctx.dry_run:
        return _count(engine, _old_runs(ctx))
    while True:
        with engine.connect() as conn:
            page = list(conn.scalars(_old_runs(ctx).order_by(DagRun.id).limit(RUN_PAGE)))
        if not page:
            return 0
        of_page = and_(
            TaskInstance.dag_run_id.in_(page), TaskInstance.dag_run_id.in_(_old_runs(ctx))
        )
        while _instances(engine, ctx, of_page) != 0:
            pass
        with _batch(engine, ctx) as conn:
            rows = conn.execute(
                select(DagRun.id, DagRun.dag_id, DagRun.run_id).where(
                    DagRun.id.in_(page), _old_run(ctx)
                )
            ).all()
            ids = [r.id for r in rows]
            ctx.count("xcom", conn.execute(delete(XCom).where(XCom.dag_run_id.in_(ids))).rowcount)
            gone = conn.execute(delete(Deadline).where(Deadline.dag_run_id.in_(ids))).rowcount
            ctx.count("deadline", gone)
            conn.execute(delete(DagRun).where(DagRun.id.in_(ids)))
            ctx.count("dag_run", len(ids))
        _remove_run_folders(ctx, rows)


def _remove_run_folders(ctx: Context, rows: Sequence[Any]) -> None:
    if ctx.log_folder is None:
        return
    for r in rows:
        folder = log_path_for(ctx.log_folder, r.dag_id, r.run_id, "x", -1, 1).parent.parent
        if folder.is_dir():
            ctx.log_files += sum(1 for p in folder.rglob("*") if p.is_file())
            shutil.rmtree(folder, ignore_errors=True)


def _clean_instances(engine: Engine, ctx: Context) -> int:
    if ctx.dry_run:
        return _count(engine, select(TaskInstance.id).where(_old_instances(ctx)))
    while _instances(engine, ctx, _old_instances(ctx)) != 0:
        pass
    return 0


def _clean_history(engine: Engine, ctx: Context) -> int:
    return _batched_delete(
        engine,
        ctx,
        TaskInstanceHistory.id,
        TaskInstanceHistory.end_date < ctx.before,
        TaskInstanceHistory.task_instance_id.in_(
            select(TaskInstance.id).where(_old_instances(ctx))
        ),
    )


def _clean_xcoms(engine: Engine, ctx: Context) -> int:
    return _batched_delete(
        engine, ctx, XCom.id, XCom.created_at < ctx.before, XCom.dag_run_id.in_(_old_runs(ctx))
    )


def _clean_deadlines(engine: Engine, ctx: Context) -> int:
    return _batched_delete(engine, ctx, Deadline.id, Deadline.dag_run_id.in_(_old_runs(ctx)))


def _unused_triggers(ctx: Context) -> Any:
    in_use = exists().where(TaskInstance.trigger_id == Trigger.id, TaskInstance.state.in_(_USING))
    return select(Trigger.id).where(
        Trigger.completed.is_(True), Trigger.created_at < ctx.before, ~in_use
    )


def _pages(engine: Engine, which: Any, key: Any) -> Iterator[list[int]]:
    """``which`` (a select of ``key``) a page at a time, by key (no OFFSET)."""
    last = None
    while True:
        q = which if last is None else which.where(key > last)
        with engine.connect() as conn:
            page = list(conn.scalars(q.order_by(key).limit(RUN_PAGE)))
        if not page:
            return
        yield page
        last = page[-1]


def _clean_events(engine: Engine, ctx: Context) -> int:
    if ctx.dry_run:
        return _count(
            engine,
            select(TriggerEvent.id).where(TriggerEvent.trigger_id.in_(_unused_triggers(ctx))),
        )
    for page in _pages(engine, _unused_triggers(ctx), Trigger.id):
        _delete_ranges(engine, ctx, _EVENTS, page)
        _delete_ranges(engine, ctx, _DEDUP, page)
    return 0


def _clean_triggers(engine: Engine, ctx: Context) -> int:
    if not ctx.dry_run:
        _clean_events(engine, ctx)
    return _batched_delete(engine, ctx, Trigger.id, Trigger.id.in_(_unused_triggers(ctx)))


def _clean_stream_items(engine: Engine, ctx: Context) -> int:
    streams = select(Stream.id).where(
        Stream.task_instance_id.in_(
            select(TaskInstance.id).where(TaskInstance.dag_run_id.in_(_old_runs(ctx)))
        ),
    )
    if ctx.dry_run:
        return _count(engine, select(StreamItem.stream_id).where(StreamItem.stream_id.in_(streams)))
    for page in _pages(engine, streams.where(Stream.items_removed_at.is_(None)), Stream.id):
        _delete_ranges(engine, ctx, _ITEMS, page)
        with _batch(engine, ctx) as conn:
            conn.execute(update(Stream).where(Stream.id.in_(page)).values(items_removed_at=ctx.now))
    return 0


def _clean_jobs(engine: Engine, ctx: Context) -> int:
    dead = Job.latest_heartbeat < min(ctx.before, ctx.now - JOB_DEAD_AFTER)
    stopped = and_(Job.state != "running", Job.latest_heartbeat < ctx.before)
    return _batched_delete(engine, ctx, Job.id, or_(dead, stopped))


def _clean_import_errors(engine: Engine, ctx: Context) -> int:
    return _batched_delete(engine, ctx, ImportError_.id, ImportError_.timestamp < ctx.before)


def _batched_delete(engine: Engine, ctx: Context, key: Any, *where: Any) -> int:
    """Rows matching ``where`` up to the primary key of the ``batch``-th, per transaction."""
    which = select(key).where(*where)
    if ctx.dry_run:
        return _count(engine, which)
    with _batch(engine, ctx) as conn:
        page = which.order_by(key).limit(ctx.batch).subquery()
        last = conn.scalar(select(func.max(page.c[0])))
        if last is None:
            return 0
        gone = conn.execute(delete(key.table).where(*where, key <= last)).rowcount
        ctx.count(key.table.name, gone)
    return gone


# -- SQLite: give the space back ------------------------------------------------------


def _sqlite_size(engine: Engine) -> int | None:
    if not is_sqlite(engine):
        return None
    with engine.connect() as conn:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar() or 0
        size = conn.exec_driver_sql("PRAGMA page_size").scalar() or 0
    return int(pages) * int(size)


def _incremental_vacuum(engine: Engine, ctx: Context, pages: int) -> str:
    """Return freed pages to the file system a few at a time (each step a short write);
    a database created before auto_vacuum=INCREMENTAL keeps them for reuse instead."""
    with engine.connect() as conn:
        mode = conn.exec_driver_sql("PRAGMA auto_vacuum").scalar()
    if mode != 2:
        return (
            "free pages kept for reuse (this database predates auto_vacuum=INCREMENTAL; "
            "`sqlite3 FILE 'PRAGMA auto_vacuum=INCREMENTAL; VACUUM'` while Tailrace is "
            "stopped converts it)"
        )
    freed = 0
    while True:
        with _batch(engine, ctx) as conn:
            free = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar() or 0)
            if free == 0:
                break
            step = min(free, pages)
            # The pragma frees one page per step of its statement, and the driver's
            # execute() steps once: executescript() runs it to the end (inside this
            # transaction: the engine's connections have no implicit transactions).
            raw = conn.connection.driver_connection
            assert raw is not None
            raw.executescript(f"PRAGMA incremental_vacuum({step});")
            freed += free - int(conn.exec_driver_sql("PRAGMA freelist_count").scalar() or 0)
    return f"{freed} free pages returned to the file system (incremental vacuum)"


for _table in (
    Table(
        "dag_run",
        "finished runs (with their instances, XComs, streams, triggers, logs)",
        _clean_runs,
    ),
    Table(
        "task_instance",
        "finished instances of finished runs (with their outputs, logs)",
        _clean_instances,
    ),
    Table("task_instance_history", "finished tries", _clean_history),
    Table("xcom", "XComs of finished runs", _clean_xcoms),
    Table("deadline", "deadline alerts of finished runs, missed or not", _clean_deadlines),
    Table("stream_item", "items of finished runs' streams", _clean_stream_items),
    Table("trigger_event", "events of completed triggers no instance uses", _clean_events),
    Table("trigger", "completed triggers no instance uses", _clean_triggers),
    Table("job", "stopped or long-dead components", _clean_jobs),
    Table("import_error", "import errors", _clean_import_errors),
):
    register_table(_table)
