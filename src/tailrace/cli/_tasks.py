from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import typer

from tailrace.cli._common import CliError, console, database, err_console, print_json, settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from tailrace.notify import Wakeups
    from tailrace.sdk import DAG

app = typer.Typer(help="Look at and test single tasks.", no_args_is_help=True)


def _load(dag_id: str) -> DAG:
    from tailrace.config import dag_folders
    from tailrace.dagfiles import list_dag_files, load_dag_file, prepare_import_path

    s = settings()
    prepare_import_path(s.dags_folder, s.plugins_folder)
    folders = dag_folders(s)
    for folder in folders:
        for path in list_dag_files(str(folder), ignore_file_syntax=s.dag_ignore_file_syntax):
            loaded = load_dag_file(path)
            if dag_id in loaded.dags:
                return loaded.dags[dag_id]
    raise CliError(
        f"no DAG {dag_id!r} in {' or '.join(map(str, folders))}; see `tailrace dags list` "
        "and `tailrace dags list-import-errors`"
    )


@app.command("list")
def list_(dag_id: str, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List a DAG's tasks in dependency order (imports its file here)."""
    from tailrace.cli._tables import make_table

    dag = _load(dag_id)
    rows: list[dict[str, Any]] = [
        {
            "task_id": task.task_id,
            "operator": _operator_label(task),
            "upstream": sorted(task.upstream_task_ids),
            "trigger_rule": str(task.trigger_rule),
        }
        for task in dag.topological_sort()
    ]
    if as_json:
        print_json(rows)
        return
    table = make_table(
        ("task_id", "operator", "upstream", "trigger rule"),
        [(r["task_id"], r["operator"], ", ".join(r["upstream"]), r["trigger_rule"]) for r in rows],
        title=dag_id,
        prose=(2,),
    )
    console.print(table)


def _operator_label(task: object) -> str:
    """``@task`` for a decorated task (as Airflow shows it), else the class; mapped
    tasks say so."""
    cls = getattr(task, "operator_class", type(task))
    name = getattr(cls, "custom_operator_name", None) or cls.__name__
    return f"{name} (mapped)" if cls is not type(task) else str(name)


@app.command("test")
def test(
    dag_id: str,
    task_id: str,
    map_index: int = typer.Option(-1, "--map-index"),
    conf: str = typer.Option(None, "--conf", "-c", help="Run conf as a JSON object."),
    xcom: list[str] = typer.Option(
        [], "--xcom", help="Upstream value as TASK_ID=JSON (repeatable)."
    ),
) -> None:
    """Run one task here, ignoring its dependencies and recording nothing."""
    from tailrace.connections import connections_from
    from tailrace.db import create_engine
    from tailrace.execution import run_task_in_process
    from tailrace.sdk.connections import redact
    from tailrace.variables import variables_from

    dag = _load(dag_id)
    if task_id not in dag.task_dict:
        raise CliError(
            f"DAG {dag_id!r} has no task {task_id!r}; see `tailrace tasks list {dag_id}`"
        )
    upstream = {}
    for item in xcom:
        name, _, raw = item.partition("=")
        try:
            upstream[(name, -1, "return_value")] = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CliError(f"--xcom {item!r}: the value is not JSON ({exc})") from None
    # The task's log lines go to the terminal through the CLI's root handler.
    root = logging.getLogger()
    level = root.level
    root.setLevel(min(level, logging.INFO))
    for handler in root.handlers:
        handler.setLevel(min(handler.level, logging.INFO))
    # Hooks in the task find stored connections and variables, as a worker's would.
    engine = create_engine(settings().database_url)
    try:
        with connections_from(engine), variables_from(engine):
            result = run_task_in_process(
                dag,
                task_id,
                map_index=map_index,
                conf=json.loads(conf) if conf else None,
                xcoms=upstream,
            )
    finally:
        root.setLevel(level)
        engine.dispose()
    if result.error:
        from rich.markup import escape

        err_console.print(f"[red]{escape(redact(result.error))}[/]")
    console.print(f"Task {task_id}: [bold]{result.outcome}[/]")
    for key, value in result.xcoms.items():
        console.print(f"  XCom {key} = {value!r}", markup=False)
    if result.outcome not in ("success", "skipped"):
        raise typer.Exit(1)


def _engine_and_wakeups() -> tuple[Engine, Wakeups]:
    from tailrace.notify import Wakeups

    s = settings()
    engine = database(s)
    return engine, Wakeups(s.home, engine)


@app.command("clear")
def clear(
    dag_id: str,
    task_id: list[str] = typer.Option([], "--task-id", "-t", help="Only these tasks (repeatable)."),
    run_id: str = typer.Option(None, "--run-id", help="Default: the DAG's latest run."),
    only_failed: bool = typer.Option(
        False, "--only-failed", "-f", help="Only failed and upstream-failed instances."
    ),
) -> None:
    """Run task instances again (deferred ones have their triggers cancelled)."""
    from tailrace import actions

    count = actions.clear(*_engine_and_wakeups(), dag_id, run_id, task_id, only_failed=only_failed)
    console.print(f"Cleared {count} task instances of {dag_id}")


@app.command("mark")
def mark(
    dag_id: str,
    task_id: list[str] = typer.Argument(..., help="Tasks to mark."),
    state: str = typer.Option(..., "--state", help="success, failed or skipped"),
    run_id: str = typer.Option(None, "--run-id", help="Default: the DAG's latest run."),
) -> None:
    """Set task instances' state by hand (deferred ones have their triggers cancelled)."""
    from tailrace import actions

    if state not in ("success", "failed", "skipped"):
        raise CliError(f"--state must be success, failed or skipped, not {state!r}")
    count = actions.mark(*_engine_and_wakeups(), dag_id, run_id, task_id, state)
    console.print(f"Marked {count} task instances of {dag_id} {state}")
