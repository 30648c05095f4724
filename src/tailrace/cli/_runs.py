"""Waiting for runs and showing them — shared by `dags trigger` and `dags test`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table
    from sqlalchemy import Engine

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
    from sqlalchemy import select

    from tailrace.db import read_only_engine
    from tailrace.db.models import DagRun

    with read_only_engine(engine).connect() as conn:
        state = conn.scalar(select(DagRun.state).where(DagRun.id == dag_run_id))
    assert state is not None
    return state


def is_finished(engine: Engine, dag_run_id: int) -> bool:
    from tailrace.state import FINISHED_RUN_STATES

    return run_state(engine, dag_run_id) in FINISHED_RUN_STATES


def callbacks_done(engine: Engine, dag_run_id: int) -> bool:
    from tailrace.store import dag_callbacks

    with engine.connect() as conn:
        return dag_callbacks.unfinished(conn, dag_run_id) == 0


# Polling the run's state is one indexed read: often at first (a short run is seen
# finished within milliseconds), then less often, at most this far apart.
_FIRST_POLL = 0.005
_MAX_POLL = 0.25


def wait(
    engine: Engine,
    dag_run_id: int,
    timeout: float | None,
    on_slow: Callable[[], None] | None = None,
) -> bool:
    """Poll the run's state until it finishes; False if ``timeout`` passed first."""
    from tailrace.state import FINISHED_RUN_STATES

    start = time.monotonic()
    warned = False
    pause = _FIRST_POLL
    while (state := run_state(engine, dag_run_id)) not in FINISHED_RUN_STATES:
        elapsed = time.monotonic() - start
        if timeout is not None and elapsed > timeout:
            return False
        if not warned and on_slow is not None and elapsed > 10 and state == "queued":
            on_slow()
            warned = True
        time.sleep(pause)
        pause = min(pause * 1.5, _MAX_POLL)
    return True


def styled(state: str | None) -> str:
    if state is None:
        return "[grey50]none[/]"
    return f"[{STATE_STYLES.get(state, 'white')}]{state}[/]"


def headline(rep: dict[str, Any]) -> str:
    from rich.markup import escape

    return f"[bold]{escape(rep['dag_id'])}[/] · {escape(rep['run_id'])} · {styled(rep['state'])}"


def _map_label(ti: dict[str, Any]) -> str:
    """A mapped instance's index, with its map_index_template name when it has one."""
    if ti["map_index"] < 0:
        return ""
    name = ti.get("rendered_map_index")
    return f"{ti['map_index']} {name}" if name else str(ti["map_index"])


def task_table(rep: dict[str, Any]) -> Table:
    from rich.markup import escape

    from tailrace.cli._tables import make_table

    mapped = rep.get("mapped", {})
    rows: list[tuple[str, ...]] = []
    tis = rep["task_instances"]
    for i, ti in enumerate(tis):
        rows.append(
            (
                ti["task_id"],
                escape(_map_label(ti)),
                styled(ti["state"]),
                str(ti["try_number"]),
                f"{ti['duration']:.2f}s" if ti["duration"] is not None else "",
            )
        )
        last_shown = i + 1 == len(tis) or tis[i + 1]["task_id"] != ti["task_id"]
        if last_shown and ti["task_id"] in mapped:
            more = mapped[ti["task_id"]]
            states = ", ".join(
                f"{n:,} {styled(state)}" for state, n in sorted(more["states"].items())
            )
            rows.append((ti["task_id"], f"{more['instances']:,} in all", states, "", ""))
    return make_table(("task", "map", "state", "try", "duration"), rows, right=(1, 3, 4))


def first_error(rep: dict[str, Any]) -> tuple[str, str] | None:
    for ti in rep["task_instances"]:
        if ti["state"] in ("failed", "up_for_retry") and ti["error"]:
            name = ti["task_id"] + (f"[{ti['map_index']}]" if ti["map_index"] >= 0 else "")
            return name, ti["error"]
    return None


# A mapped task lists this many instances in a run's table, then a summary line.
INSTANCES_SHOWN = 25


def report(engine: Engine, dag_run_id: int, *, all_instances: bool = False) -> dict[str, Any]:
    """The run as JSON-ready data; a mapped task with more than INSTANCES_SHOWN instances
    lists its first ones and is summarised under ``mapped`` unless ``all_instances``."""
    from tailrace.dagrun import run_summary
    from tailrace.db import read_only_engine

    shown = None if all_instances else INSTANCES_SHOWN
    with read_only_engine(engine).connect() as conn:
        return run_summary(conn, dag_run_id, instances_per_task=shown)
