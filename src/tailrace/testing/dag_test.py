"""The runner behind ``DAG.test()``: one run of a DAG in this process, as Airflow's.

A throwaway SQLite database under a temporary folder holds the run; the scheduler runs in
this thread with the inline executor, so each task's code runs here, one task at a time;
the triggerer runs in a thread beside it, so deferred tasks resume and streams flow as
they would in a deployment. Variables and connections come from ``TAILRACE_VAR_*`` and
``TAILRACE_CONN_*``, or from the files ``variable_file_path`` and ``conn_file_path``
(JSON objects of key: value and conn_id: URI) loaded into the throwaway database.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tailrace.clock import utcnow
from tailrace.connections import add_connection
from tailrace.dag_processing._parse import ParsedFile
from tailrace.dag_processing.processor import sync_parsed
from tailrace.dagrun import trigger_dag_run
from tailrace.db import create_engine, sqlite_url, upgrade
from tailrace.db.models import DagRun, TaskInstance, XCom
from tailrace.execution.protocol import Workload
from tailrace.executors.inline import InlineExecutor
from tailrace.scheduler import Scheduler
from tailrace.sdk import DAG
from tailrace.sdk._dag_test import DagTestRun
from tailrace.serialization import dumps, loads, serialize_dag
from tailrace.state import FINISHED_RUN_STATES
from tailrace.triggerer import Triggerer
from tailrace.variables import import_variables

log = logging.getLogger(__name__)


def run(
    dag: DAG,
    *,
    logical_date: datetime | None = None,
    run_conf: Mapping[str, Any] | None = None,
    conn_file_path: str | None = None,
    variable_file_path: str | None = None,
    timeout: float = 3600.0,
) -> DagTestRun:
    with tempfile.TemporaryDirectory(prefix="tailrace-dag-test-") as home:
        engine = create_engine(sqlite_url(Path(home) / "dag_test.db"))
        try:
            upgrade(engine)
            _load_files(engine, conn_file_path, variable_file_path, Path(home))
            now = utcnow()
            parsed = ParsedFile(path=dag.fileloc, dags={dag.dag_id: dumps(serialize_dag(dag))})
            with engine.begin() as conn:
                sync_parsed(conn, str(Path(dag.fileloc).parent), [parsed], now)
            pk, _ = trigger_dag_run(
                engine, dag.dag_id, dict(run_conf or {}), logical_date=logical_date
            )
            _run(engine, dag, pk, Path(home) / "logs", timeout)
            return _result(engine, dag.dag_id, pk)
        finally:
            engine.dispose()


def _load_files(engine: Any, conns: str | None, variables: str | None, home: Path) -> None:
    if variables is not None:
        import_variables(engine, _json_object(variables), keys=None)
    if conns is not None:
        for conn_id, uri in _json_object(conns).items():
            add_connection(engine, conn_id, str(uri), replace=True)


def _json_object(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, not {type(data).__name__}")
    return data


def _run(engine: Any, dag: DAG, pk: int, log_folder: Path, timeout: float) -> None:
    def echo(job: Workload) -> None:
        path = Path(job.log_path)
        if path.exists():
            sys.stderr.write(path.read_text())

    executor = InlineExecutor([dag], at_once=True, after_task=echo)
    scheduler = Scheduler(
        engine, executor, log_folder=log_folder, poll_interval=0.2, only_runs={pk}
    )
    triggerer = Triggerer(engine, log_folder=str(log_folder), only_runs={pk})
    scheduler.on_triggers_changed = triggerer.wake
    triggerer.on_events = scheduler.events_arrived
    triggerer.on_asset_events = scheduler.asset_events_arrived
    scheduler.on_acks = triggerer.acks_arrived
    thread = triggerer.run_in_thread()
    try:
        finished = scheduler.run_until(lambda: _finished(engine, pk), timeout=timeout)
    finally:
        scheduler.stop()
        triggerer.stop()
        thread.join(timeout=30)
    if not finished:
        raise TimeoutError(f"DAG {dag.dag_id!r}: dag.test() did not finish in {timeout:.0f} s")


def _finished(engine: Any, pk: int) -> bool:
    with engine.connect() as conn:
        return conn.scalar(select(DagRun.state).where(DagRun.id == pk)) in FINISHED_RUN_STATES


def _result(engine: Any, dag_id: str, pk: int) -> DagTestRun:
    with engine.connect() as conn:
        run = conn.execute(select(DagRun.run_id, DagRun.state).where(DagRun.id == pk)).one()
        tis = conn.execute(
            select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state)
            .where(TaskInstance.dag_run_id == pk)
            .order_by(TaskInstance.id)
        ).all()
        xcoms = conn.execute(
            select(XCom.task_id, XCom.value).where(
                XCom.dag_run_id == pk, XCom.key == "return_value", XCom.map_index == -1
            )
        ).all()
    return DagTestRun(
        dag_id=dag_id,
        run_id=run.run_id,
        state=str(run.state),
        task_states={
            (t.task_id if t.map_index < 0 else f"{t.task_id}[{t.map_index}]"): t.state for t in tis
        },
        return_values={x.task_id: loads(x.value) for x in xcoms},
    )
