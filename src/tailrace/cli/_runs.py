"""Waiting for runs and showing them — shared by `dags trigger` and `dags test`."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from sqlalchemy import Engine, select

from tailrace.dagrun import run_summary
from tailrace.db import read_only_engine
from tailrace.db.models import DagRun
from tailrace.state import FINISHED_RUN_STATES

STATE_STYLES = {
    "success": "green",
    "failed": "red",
    "upstream_failed": "dark_orange",
    "up_for_retry": "yellow",
    "skipped": "magenta",
    "running": "cyan",
    "queued": "grey50",
    "scheduled": "tan",
    "deferred": "medium_purple",
}


def run_state(engine: Engine, dag_run_id: int) -> str:
    with read_only_engine(engine).connect() as conn:
        state = conn.scalar(select(DagRun.state).where(DagRun.id == dag_run_id))
    assert state is not None
    return state


def is_finished(engine: Engine, dag_run_id: int) -> bool:
    return run_state(engine, dag_run_id) in FINISHED_RUN_STATES


def wait(engine: Engine, dag_run_id: int, timeout: float | None, on_slow: Any = None) -> bool:
    """Poll the run's state (a cheap indexed read) until it finishes."""
    start = time.monotonic()
    warned = False
    while not is_finished(engine, dag_run_id):
        elapsed = time.monotonic() - start
        if timeout is not None and elapsed > timeout:
            return False
        if (
            not warned
            and on_slow is not None
            and elapsed > 10
            and run_state(engine, dag_run_id) == "queued"
        ):
            on_slow()
            warned = True
        time.sleep(0.05)
    return True


def styled(state: str | None) -> str:
    if state is None:
        return "[grey50]none[/]"
    return f"[{STATE_STYLES.get(state, 'white')}]{state}[/]"


def headline(rep: dict[str, Any]) -> str:
    return f"[bold]{rep['dag_id']}[/] · {rep['run_id']} · {styled(rep['state'])}"


def _map_label(ti: dict[str, Any]) -> str:
    """A mapped instance's index, with its map_index_template name when it has one."""
    if ti["map_index"] < 0:
        return ""
    name = ti.get("rendered_map_index")
    return f"{ti['map_index']} {name}" if name else str(ti["map_index"])


def task_table(rep: dict[str, Any]) -> Table:
    table = Table()
    for column in ("task", "map", "state", "try", "duration"):
        table.add_column(
            column, justify="right" if column in ("map", "try", "duration") else "left"
        )
    mapped = rep.get("mapped", {})
    rows = rep["task_instances"]
    for i, ti in enumerate(rows):
        table.add_row(
            ti["task_id"],
            _map_label(ti),
            styled(ti["state"]),
            str(ti["try_number"]),
            f"{ti['duration']:.2f}s" if ti["duration"] is not None else "",
        )
        last_shown = i + 1 == len(rows) or rows[i + 1]["task_id"] != ti["task_id"]
        if last_shown and ti["task_id"] in mapped:
            more = mapped[ti["task_id"]]
            states = ", ".join(f"{n:,} {state}" for state, n in sorted(more["states"].items()))
            table.add_row(ti["task_id"], f"… {more['instances']:,}", f"in all: {states}", "", "")
    return table


def first_error(rep: dict[str, Any]) -> tuple[str, str] | None:
    for ti in rep["task_instances"]:
        if ti["state"] in ("failed", "up_for_retry") and ti["error"]:
            name = ti["task_id"] + (f"[{ti['map_index']}]" if ti["map_index"] >= 0 else "")
            return name, ti["error"]
    return None


# A mapped task lists this many instances in a run's table, then a summary line.
INSTANCES_SHOWN = 25


def report(engine: Engine, dag_run_id: int) -> dict[str, Any]:
    with read_only_engine(engine).connect() as conn:
        return run_summary(conn, dag_run_id, instances_per_task=INSTANCES_SHOWN)
