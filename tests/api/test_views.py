"""The UI's pure helpers: a mapped task's summary state, the graph's layered layout with
its task groups, and the names operators are shown by."""

from __future__ import annotations

from tailrace.api._views import _error_line, _layout, operator_name, summary_state
from tailrace.serialization import SerializedTask


def _task(task_id: str, *upstream: str, group: str | None = None) -> SerializedTask:
    return SerializedTask(
        task_id=task_id, operator="EmptyOperator", upstream=list(upstream), task_group=group
    )


def test_a_mapped_task_shows_the_state_that_most_needs_attention() -> None:
    assert summary_state({"success": 812, "running": 40, "queued": 148}) == "running"
    assert summary_state({"success": 9, "failed": 1, "running": 3}) == "failed"
    assert summary_state({"success": 3, "none": 2}) is None  # not all scheduled yet
    assert summary_state({"success": 3, "skipped": 2}) == "success"
    assert summary_state({"skipped": 2}) == "skipped"
    assert summary_state({}) is None


def test_layers_follow_the_longest_path_and_rows_follow_upstreams() -> None:
    # start -> (a, b) -> join; b -> late -> end; a task with no upstream is a root.
    tasks = [
        _task("start"),
        _task("lonely"),
        _task("b", "start"),
        _task("a", "start"),
        _task("late", "b"),
        _task("join", "a", "b"),
        _task("end", "late", "join"),
    ]
    placed = _layout(tasks).positions
    layers = {t: layer for t, (layer, _) in placed.items()}
    assert layers == {
        "start": 0, "lonely": 0, "a": 1, "b": 1, "late": 2, "join": 2, "end": 3
    }  # fmt: skip
    # Inside a layer no two tasks share a row.
    rows = [(layer, row) for layer, row in placed.values()]
    assert len(rows) == len(set(rows))


def test_a_task_groups_box_holds_its_tasks_and_no_others() -> None:
    # start -> etl.extract -> etl.clean.a / etl.clean.b -> etl.load -> end, and a loose
    # task beside the group in the same layers.
    tasks = [
        _task("start"),
        _task("etl.extract", "start", group="etl"),
        _task("side", "start"),
        _task("etl.clean.a", "etl.extract", group="etl.clean"),
        _task("etl.clean.b", "etl.extract", group="etl.clean"),
        _task("etl.load", "etl.clean.a", "etl.clean.b", group="etl"),
        _task("end", "etl.load", "side"),
    ]
    layout = _layout(tasks)
    etl, clean = layout.groups
    assert (etl.group_id, etl.label, etl.parent, etl.depth) == ("etl", "etl", None, 0)
    assert (clean.group_id, clean.label, clean.parent, clean.depth) == (
        "etl.clean", "clean", "etl", 1
    )  # fmt: skip
    assert (etl.first_layer, etl.last_layer) == (1, 3)
    assert (clean.first_layer, clean.last_layer) == (2, 2)
    for group in layout.groups:
        inside = {
            task_id
            for task_id, (layer, row) in layout.positions.items()
            if group.first_layer <= layer <= group.last_layer
            and group.first_row <= row <= group.last_row
        }
        members = {t.task_id for t in tasks if (t.task_group or "").startswith(group.group_id)}
        assert inside == members, group
    rows = list(layout.positions.values())
    assert len(rows) == len(set(rows))  # no two tasks in one place


def test_operators_made_by_task_decorators_show_the_decorators_name() -> None:
    assert operator_name("_BranchPythonDecoratedOperator") == "@task.branch"
    assert operator_name("_PythonDecoratedOperator") == "@task"
    assert operator_name("_BashDecoratedOperator") == "@task.bash"
    assert operator_name("BashOperator") == "BashOperator"


def test_an_errors_summary_is_its_last_line() -> None:
    error = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom\n\n'
    assert _error_line(error) == "ValueError: boom"
    assert len(_error_line("x" * 1000)) == 300
