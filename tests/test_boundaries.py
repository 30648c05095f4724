"""Process boundaries from DESIGN.md, enforced: who may import what."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tailrace


def imported_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_workers_import_no_database_code() -> None:
    # A worker runs user code and talks to its owner over a pipe: no credentials, no ORM.
    modules = imported_after(
        "from tailrace.execution._worker import worker_main\nimport tailrace.sdk.execution"
    )
    assert not {m for m in modules if m.split(".")[0] in ("sqlalchemy", "alembic", "psycopg")}
    assert "tailrace.db" not in modules
    assert "tailrace.scheduler" not in modules


_SRC = Path(tailrace.__file__).parent
# Columns that make up a task instance's state: only the state machine writes them.
_STATE_COLUMNS = {"state", "try_number", "max_tries"}


def _state_writes(tree: ast.AST) -> list[int]:
    """Lines of ``update(TaskInstance)…values(state=…)`` chains in a module."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "values":
            continue
        chain = ast.unparse(node.func.value)
        if "update(TaskInstance)" not in chain and "update(models.TaskInstance)" not in chain:
            continue
        if {k.arg for k in node.keywords} & _STATE_COLUMNS or any(
            k.arg is None for k in node.keywords
        ):
            lines.append(node.lineno)
    return lines


def test_only_the_state_machine_writes_task_instance_state() -> None:
    # ADR 0011: a new behaviour on a transition is a hook, never another UPDATE elsewhere.
    offenders = {
        str(path.relative_to(_SRC)): lines
        for path in _SRC.rglob("*.py")
        if path.name != "transitions.py"
        and (lines := _state_writes(ast.parse(path.read_text(), str(path))))
    }
    assert offenders == {}


def test_the_state_write_check_sees_a_write() -> None:
    source = "conn.execute(update(TaskInstance).where(x).values(state='failed'))"
    assert _state_writes(ast.parse(source)) == [1]


def _run_state_writes(tree: ast.AST) -> list[int]:
    """Lines of ``update(DagRun)…values(state=…)`` chains in a module."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "values" or "update(DagRun)" not in ast.unparse(node.func.value):
            continue
        if any(k.arg in ("state", None) for k in node.keywords):
            lines.append(node.lineno)
    return lines


def test_only_the_state_machine_writes_dag_run_state() -> None:
    # ADR 0027: a run's state changes in tailrace.transitions, where its callbacks are
    # recorded in the same transaction.
    offenders = {
        str(path.relative_to(_SRC)): lines
        for path in _SRC.rglob("*.py")
        if path.name != "transitions.py"
        and (lines := _run_state_writes(ast.parse(path.read_text(), str(path))))
    }
    assert offenders == {}
    assert _run_state_writes(ast.parse("update(DagRun).where(x).values(state='failed')")) == [1]
