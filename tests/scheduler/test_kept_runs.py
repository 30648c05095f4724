"""A run's unmapped instances kept between passes (ADR 0046, 0052): triggers stamp every
change a pass reads, from any writer — SQLite with a counter, PostgreSQL with the writing
transaction's id, read against the snapshot the pass read in — and the pass's rows always
equal a fresh read."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, delete, insert, select, text, update
from test_transitions import RecordingExecutor  # the test plays the workers

from tailrace import transitions
from tailrace.dag_processing._parse import ParsedFile
from tailrace.dag_processing.processor import sync_parsed
from tailrace.dagrun import clear_task_instances, mark_task_instances, trigger_dag_run
from tailrace.db.models import DagRun, TaskInstance
from tailrace.execution import RunTask, TaskFinished, TaskStarted
from tailrace.scheduler import Scheduler
from tailrace.scheduler._pass import _TI_COLUMNS
from tailrace.scheduler._planner import RunRows, TIRow, Unmapped, plan_run
from tailrace.serialization import SerializedDag, SerializedSchedule, SerializedTask, dumps
from tailrace.testing import FakeClock
from tailrace.transitions import Transition

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)


class Chain:
    """A chain of ``n`` tasks planned by a real scheduler; the test plays the workers."""

    def __init__(self, engine: Engine, log_folder: Path, n: int) -> None:
        self.engine = engine
        ids = [f"t{i}" for i in range(n)]
        dag = SerializedDag(
            dag_id="kept",
            fileloc="/nowhere/kept.py",
            schedule=SerializedSchedule(kind="none"),
            tasks=[
                SerializedTask(
                    task_id=t,
                    operator="Op",
                    upstream=ids[i - 1 : i],
                    downstream=ids[i + 1 : i + 2],
                )
                for i, t in enumerate(ids)
            ],
        )
        self.dag = dag
        clock = FakeClock(NOW)
        with engine.begin() as conn:
            sync_parsed(
                conn, "/nowhere", [ParsedFile(path=dag.fileloc, dags={"kept": dumps(dag)})], NOW
            )
        self.executor = RecordingExecutor()
        self.scheduler = Scheduler(
            engine, self.executor, log_folder=log_folder, poll_interval=3600, clock=clock
        )
        self.scheduler.start()
        self.run_pk, _ = trigger_dag_run(engine, "kept", {})
        self.kept = self.scheduler._pass.kept

    def step(self, *events: TaskStarted | TaskFinished) -> list[RunTask]:
        for event in events:
            self.scheduler.inbox.put(event)
        self.scheduler.wake()
        self.scheduler.step()
        return self.executor.take()

    def ran(self, w: RunTask) -> tuple[TaskStarted, TaskFinished]:
        return (
            TaskStarted(
                ti_id=w.ti_id, try_number=w.try_number, pid=1, hostname="h", start_date=NOW
            ),
            TaskFinished(
                ti_id=w.ti_id,
                try_number=w.try_number,
                outcome="success",
                start_date=NOW,
                end_date=NOW,
            ),
        )

    def loaded(self) -> list[TIRow]:
        """What a pass loads for the run now, in a write transaction as a step's."""
        return sorted(self.loaded_index().rows(), key=lambda r: r.id)

    def loaded_index(self) -> Unmapped:
        """The run's unmapped instances as a pass loads them, indexed for the planner."""
        with self.engine.begin() as conn:
            _, tis, _, _ = self.scheduler._pass._load(conn, [self.run_pk], None)
            return tis[self.run_pk].unmapped


def parts(index: Unmapped) -> dict[str, object]:
    """What the planner reads of an index, in a form that compares."""
    return {
        "by_task": index.by_task,
        "state": index.state,
        "pending": index.pending,
        "retrying": {t: r.id for t, r in index.retrying.items()},
        "done": index.done,
        "active": index.active,
        "unfinished": {t: r.id for t, r in index.unfinished.items()},
    }


def fresh(conn: Connection, run_pk: int) -> list[TIRow]:
    rows = conn.execute(
        select(*_TI_COLUMNS)
        .where(TaskInstance.dag_run_id == run_pk, TaskInstance.map_index == -1)
        .order_by(TaskInstance.id)
    )
    return [TIRow(*r[1:]) for r in rows]


def read_fresh(engine: Engine, run_pk: int) -> list[TIRow]:
    with engine.connect() as conn:
        return fresh(conn, run_pk)


@pytest.fixture
def chain(engine: Engine, tmp_path: Path) -> Iterator[Chain]:
    c = Chain(engine, tmp_path / "logs", 8)
    yield c
    c.scheduler.stop()


sqlite_only = pytest.mark.parametrize("db_backend", ["sqlite"])
postgres_only = pytest.mark.parametrize("db_backend", ["postgres"])


def versions(engine: Engine, run_pk: int) -> tuple[int, int]:
    with engine.connect() as conn:
        row = conn.execute(
            select(DagRun.ti_version, DagRun.ti_reload_version).where(DagRun.id == run_pk)
        ).one()
    return row.ti_version, row.ti_reload_version


# The triggers on task_instance, by name: their definitions.
_TRIGGERS = {
    "sqlite": "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'",
    "postgresql": (
        "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
        "WHERE tgrelid = 'task_instance'::regclass AND NOT tgisinternal"
    ),
}


def test_the_triggers_watch_every_column_the_pass_reads(engine: Engine) -> None:
    with engine.connect() as conn:
        found = dict(conn.execute(text(_TRIGGERS[engine.dialect.name])).all())
    assert {"ti_unmapped_added", "ti_unmapped_changed", "ti_unmapped_left"} <= found.keys()
    assert "ti_unmapped_removed" in found
    watched = re.search(r"UPDATE OF (.+?) ON ", found["ti_unmapped_changed"])
    assert watched is not None
    columns = {c.strip() for c in watched.group(1).split(",")}
    # The primary key never changes; every other column a pass reads is watched.
    assert {c.name for c in _TI_COLUMNS} - {"id"} <= columns


@postgres_only
def test_on_postgresql_a_change_the_pass_reads_is_stamped_with_its_transaction(
    chain: Chain,
) -> None:
    engine, pk = chain.engine, chain.run_pk

    def stamp(ti_id: int) -> int:
        with engine.connect() as conn:
            return int(
                conn.scalar(select(TaskInstance.row_version).where(TaskInstance.id == ti_id))
            )

    with engine.begin() as conn:
        first = conn.scalar(select(TaskInstance.id).where(TaskInstance.dag_run_id == pk).limit(1))
        conn.execute(update(TaskInstance).where(TaskInstance.id == first).values(max_tries=3))
        writer = int(conn.scalar(text("SELECT pg_current_xact_id()::text")))
    assert stamp(first) == writer
    with engine.begin() as conn:
        conn.execute(
            update(TaskInstance).where(TaskInstance.id == first).values(last_heartbeat_at=NOW)
        )
        conn.execute(update(TaskInstance).where(TaskInstance.id == first).values(max_tries=3))
    assert stamp(first) == writer  # a heartbeat, or a value written again, moves nothing
    assert versions(engine, pk)[1] == 0
    with engine.begin() as conn:
        conn.execute(delete(TaskInstance).where(TaskInstance.id == first))
        deleter = int(conn.scalar(text("SELECT pg_current_xact_id()::text")))
    assert versions(engine, pk)[1] == deleter


@postgres_only
def test_a_write_in_progress_while_a_pass_reads_is_read_once_committed(
    chain: Chain,
) -> None:
    """The snapshot a pass read in does not see a transaction still running then, even one
    that began before others that committed: its rows are read back once it commits."""
    chain.step()
    engine, pk = chain.engine, chain.run_pk
    ids = [r.id for r in read_fresh(engine, pk)]
    with engine.connect() as slow, engine.connect() as quick:
        slow_tx = slow.begin()
        slow.execute(update(TaskInstance).where(TaskInstance.id == ids[3]).values(max_tries=7))
        with quick.begin():
            quick.execute(update(TaskInstance).where(TaskInstance.id == ids[5]).values(max_tries=9))
        # The pass reads: the quick write is in, the slow one (an older transaction) not.
        loaded = {r.id: r for r in chain.loaded()}
        assert (loaded[ids[3]].max_tries, loaded[ids[5]].max_tries) == (0, 9)
        slow_tx.commit()
    reads = chain.kept.full_reads
    assert chain.loaded() == read_fresh(engine, pk)
    assert {r.id: r for r in chain.loaded()}[ids[3]].max_tries == 7
    assert chain.kept.full_reads == reads  # read back, not read whole


@sqlite_only
def test_a_change_the_pass_reads_moves_the_versions_and_a_heartbeat_does_not(
    chain: Chain,
) -> None:
    engine, pk = chain.engine, chain.run_pk
    before, reload_before = versions(engine, pk)
    with engine.begin() as conn:
        first = conn.scalar(select(TaskInstance.id).where(TaskInstance.dag_run_id == pk).limit(1))
        conn.execute(update(TaskInstance).where(TaskInstance.id == first).values(max_tries=3))
    after, reload_after = versions(engine, pk)
    assert (after, reload_after) == (before + 1, reload_before)
    with engine.connect() as conn:
        assert (
            conn.scalar(select(TaskInstance.row_version).where(TaskInstance.id == first)) == after
        )
    with engine.begin() as conn:
        conn.execute(
            update(TaskInstance).where(TaskInstance.id == first).values(last_heartbeat_at=NOW)
        )
    assert versions(engine, pk) == (after, reload_after)
    with engine.begin() as conn:
        conn.execute(delete(TaskInstance).where(TaskInstance.id == first))
    assert versions(engine, pk) == (after + 1, after + 1)


def test_a_chain_is_read_whole_once_and_then_only_what_changed(chain: Chain) -> None:
    [w] = chain.step()
    for _ in range(7):
        [w] = chain.step(*chain.ran(w))
    assert chain.step(*chain.ran(w)) == []
    # One whole read when the run was first planned; each of the 8 later passes read the
    # changes; the run ended, so it is no longer kept.
    assert (chain.kept.full_reads, chain.kept.reads, len(chain.kept)) == (1, 8, 0)
    assert all(r.state == "success" for r in read_fresh(chain.engine, chain.run_pk))


# What another writer may do to a run's unmapped instances between passes.
def _write(conn: Connection, rng: random.Random, run_pk: int, step: int) -> str:
    rows = fresh(conn, run_pk)
    row = rng.choice(rows)
    what = rng.choice(["state", "state", "tries", "heartbeat", "mark", "clear", "add", "remove"])
    if what == "state":
        state = rng.choice(
            [None, "scheduled", "queued", "running", "success", "failed", "up_for_retry", "skipped"]
        )
        conn.execute(update(TaskInstance).where(TaskInstance.id == row.id).values(state=state))
    elif what == "tries":
        conn.execute(
            update(TaskInstance)
            .where(TaskInstance.id == row.id)
            .values(try_number=row.try_number + 1, next_retry_at=NOW, next_method="m")
        )
    elif what == "heartbeat":
        conn.execute(
            update(TaskInstance).where(TaskInstance.id == row.id).values(last_heartbeat_at=NOW)
        )
    elif what == "mark":
        mark_task_instances(conn, run_pk, [row.task_id], "success", NOW)
    elif what == "clear":
        clear_task_instances(conn, run_pk, [row.task_id], NOW)
    elif what == "add":
        run = conn.execute(select(DagRun.dag_id, DagRun.run_id).where(DagRun.id == run_pk)).one()
        conn.execute(
            insert(TaskInstance).values(
                dag_run_id=run_pk,
                dag_id=run.dag_id,
                run_id=run.run_id,
                task_id=f"added{step}",
                map_index=-1,
            )
        )
    elif len(rows) > 2:
        conn.execute(delete(TaskInstance).where(TaskInstance.id == row.id))
    return what


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_what_a_pass_loads_equals_a_fresh_read_whatever_was_written(
    chain: Chain, seed: int
) -> None:
    rng = random.Random(seed)
    chain.step()  # the run planned once: on SQLite its rows are kept from here
    for step in range(60):
        with chain.engine.begin() as conn:
            what = _write(conn, rng, chain.run_pk, step)
            # A clear queues the run again: keep it running, so that a pass plans it.
            conn.execute(update(DagRun).where(DagRun.id == chain.run_pk).values(state="running"))
        index, fresh_rows = chain.loaded_index(), read_fresh(chain.engine, chain.run_pk)
        assert sorted(index.rows(), key=lambda r: r.id) == fresh_rows, (step, what)
        # The index the planner reads, kept row by row, equals one built afresh; and so
        # does the plan made from it.
        assert parts(index) == parts(Unmapped(fresh_rows)), (step, what)
        assert plan_run(chain.dag, RunRows(index), NOW) == plan_run(chain.dag, fresh_rows, NOW)
    assert chain.kept.reads > chain.kept.full_reads > 1  # kept, and read whole after removes


def test_a_step_whose_transaction_failed_forgets_what_it_kept(chain: Chain) -> None:
    [w] = chain.step()
    assert len(chain.kept) == 1

    def refuse(conn: Connection, batch: Sequence[Transition]) -> None:
        if any(t.kind == "queue" for t in batch):
            raise RuntimeError("the database went away")

    unregister = transitions.register_hook(refuse)
    try:
        with pytest.raises(RuntimeError):
            chain.step(*chain.ran(w))
    finally:
        unregister()
    # Rows read in the rolled-back transaction (t0 finished, t1 queued) are not kept.
    assert len(chain.kept) == 0
    [w1] = chain.step()
    assert (w1.task_id, w1.try_number) == ("t1", 1)
    assert chain.loaded() == read_fresh(chain.engine, chain.run_pk)


@sqlite_only
def test_a_new_run_given_a_deleted_runs_id_is_read_whole(chain: Chain) -> None:
    [w] = chain.step()
    chain.step(*chain.ran(w))  # kept: t0 succeeded, t1 queued
    old = chain.run_pk
    with chain.engine.begin() as conn:
        conn.execute(delete(DagRun).where(DagRun.id == old))
    # SQLite gives the largest id deleted to the next row: the kept rows are another run's.
    chain.run_pk, _ = trigger_dag_run(chain.engine, "kept", {})
    assert chain.run_pk == old
    [w] = chain.step()
    assert w.task_id == "t0"
    assert chain.loaded() == read_fresh(chain.engine, chain.run_pk)
