from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from tailrace.scheduler._planner import Past, TIRow, plan_run, retry_delay_seconds
from tailrace.serialization import SerializedDag, SerializedSchedule, SerializedTask
from tailrace.state import DagRunState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def chain_dag(*task_ids: str, rule: str = "all_success") -> SerializedDag:
    tasks = []
    for i, t in enumerate(task_ids):
        tasks.append(
            SerializedTask(
                task_id=t,
                operator="EmptyOperator",
                upstream=[task_ids[i - 1]] if i else [],
                downstream=[task_ids[i + 1]] if i + 1 < len(task_ids) else [],
                trigger_rule=rule if i else "all_success",
            )
        )
    return SerializedDag(
        dag_id="d", fileloc="d.py", schedule=SerializedSchedule(kind="none"), tasks=tasks
    )


def rows(*states: str | None) -> list[TIRow]:
    return [TIRow(id=i, task_id="abcdefgh"[i], map_index=-1, state=s) for i, s in enumerate(states)]


def test_only_the_root_is_ready_at_first() -> None:
    plan = plan_run(chain_dag("a", "b", "c"), rows(None, None, None), NOW)
    assert [r.task_id for r in plan.ready] == ["a"]
    assert plan.run_state is None


def test_failure_cascades_down_the_chain_in_one_pass() -> None:
    plan = plan_run(chain_dag("a", "b", "c"), rows("failed", None, None), NOW)
    assert plan.finish == {1: "upstream_failed", 2: "upstream_failed"}
    assert plan.run_state is DagRunState.FAILED


def test_all_success_finishes_the_run() -> None:
    plan = plan_run(chain_dag("a", "b"), rows("success", "success"), NOW)
    assert plan.run_state is DagRunState.SUCCESS


def test_leaf_with_all_done_makes_a_failed_middle_a_successful_run() -> None:
    plan = plan_run(chain_dag("a", "b", rule="all_done"), rows("failed", "success"), NOW)
    assert plan.run_state is DagRunState.SUCCESS


def test_retry_waits_for_its_moment() -> None:
    dag = chain_dag("a")
    waiting = [TIRow(0, "a", -1, "up_for_retry", 1, 1, NOW + timedelta(seconds=5))]
    assert plan_run(dag, waiting, NOW).ready == []
    assert [r.id for r in plan_run(dag, waiting, NOW + timedelta(seconds=5)).ready] == [0]


def test_exponential_backoff_is_capped() -> None:
    assert retry_delay_seconds(10, 1, True, None) == 10
    assert retry_delay_seconds(10, 3, True, None) == 40
    assert retry_delay_seconds(10, 10, True, 60) == 60
    assert retry_delay_seconds(10, 3, False, None) == 10


def past_dag(**flags: bool) -> SerializedDag:
    dag = chain_dag("a", "b")
    tasks = [msgspec.structs.replace(dag.tasks[0], **flags), dag.tasks[1]]
    return msgspec.structs.replace(dag, tasks=tasks)


def test_depends_on_past_holds_a_task_until_its_previous_instance_succeeded() -> None:
    dag = past_dag(depends_on_past=True)
    held = plan_run(dag, rows(None, None), NOW, past=Past({("a", -1): "failed"}))
    assert (held.ready, held.waiting_on_past) == ([], True)
    for previous in ("success", "skipped"):
        plan = plan_run(dag, rows(None, None), NOW, past=Past({("a", -1): previous}))
        assert ([r.task_id for r in plan.ready], plan.waiting_on_past) == (["a"], False)
    # The first run, or a previous run without the task: nothing to wait for.
    assert [r.task_id for r in plan_run(dag, rows(None, None), NOW, past=None).ready] == ["a"]
    assert [r.task_id for r in plan_run(dag, rows(None, None), NOW, past=Past()).ready] == ["a"]


def test_wait_for_downstream_also_waits_for_the_previous_direct_downstream() -> None:
    dag = past_dag(depends_on_past=True, wait_for_downstream=True)
    states = {("a", -1): "success", ("b", -1): "failed"}
    assert plan_run(dag, rows(None, None), NOW, past=Past(states)).ready == []
    states[("b", -1)] = "success"
    assert [r.task_id for r in plan_run(dag, rows(None, None), NOW, past=Past(states)).ready] == [
        "a"
    ]
