"""Fixtures for the SDK unit tests: a dict-backed stand-in for the runtime's task instance."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tailrace.sdk import DAG
from tailrace.sdk._dag import pop_registered_dags
from tailrace.sdk._node import AbstractOperator
from tailrace.sdk.execution import DagRunInfo, build_context, execute_task

XComStore = dict[tuple[str, int, str], Any]


class FakeTI:
    """Implements ``RuntimeTaskInstance`` over a dict ``{(task_id, map_index, key): value}``."""

    def __init__(
        self,
        store: XComStore,
        *,
        task_id: str,
        map_index: int = -1,
        dag_id: str = "d",
        run_id: str = "run1",
        try_number: int = 1,
        max_tries: int = 0,
    ) -> None:
        self.store = store
        self.dag_id = dag_id
        self.run_id = run_id
        self.task_id = task_id
        self.map_index = map_index
        self.try_number = try_number
        self.max_tries = max_tries
        self.skipped: list[str] | None = None

    def _pull_one(
        self, task_id: str, key: str, map_indexes: int | Iterable[int] | None, default: Any
    ) -> Any:
        if isinstance(map_indexes, int):
            return self.store.get((task_id, map_indexes, key), default)
        found = sorted((mi, v) for (t, mi, k), v in self.store.items() if t == task_id and k == key)
        if map_indexes is not None:
            wanted = set(map_indexes)
            return [v for mi, v in found if mi in wanted]
        if any(mi >= 0 for mi, _ in found):
            return [v for mi, v in found]
        return found[0][1] if found else default

    def xcom_pull(
        self,
        task_ids: str | Iterable[str] | None = None,
        key: str = "return_value",
        map_indexes: int | Iterable[int] | None = None,
        default: Any = None,
        dag_id: str | None = None,
        run_id: str | None = None,
    ) -> Any:
        if task_ids is None:
            task_ids = self.task_id
        if isinstance(task_ids, str):
            return self._pull_one(task_ids, key, map_indexes, default)
        return [self._pull_one(t, key, map_indexes, default) for t in task_ids]

    def xcom_push(self, key: str, value: Any) -> None:
        self.store[(self.task_id, self.map_index, key)] = value

    def skip_downstream_tasks(self, task_ids: Collection[str]) -> None:
        self.skipped = sorted(task_ids)

    def mapped_length(self, task_id: str) -> int:
        return 1 + max((mi for (t, mi, _) in self.store if t == task_id), default=-1)


class Runner:
    """Runs tasks of a DAG one by one, sharing one XCom store (no scheduling)."""

    def __init__(
        self,
        dag: DAG,
        conf: dict[str, Any] | None = None,
        logical_date: datetime | None = datetime(2024, 3, 5, 6, 7, 8, tzinfo=UTC),
    ) -> None:
        self.dag = dag
        self.store: XComStore = {}
        self.dag_run = DagRunInfo(
            dag_id=dag.dag_id,
            run_id="run1",
            logical_date=logical_date,
            data_interval_start=logical_date,
            data_interval_end=logical_date,
            run_type="manual",
            conf=dict(conf or {}),
            start_date=logical_date,
        )
        self.last_ti: FakeTI | None = None

    def ti(self, task_id: str, map_index: int = -1) -> FakeTI:
        return FakeTI(self.store, task_id=task_id, map_index=map_index, dag_id=self.dag.dag_id)

    def context(self, task_id: str, map_index: int = -1) -> Any:
        task: AbstractOperator = self.dag.get_task(task_id)
        self.last_ti = self.ti(task_id, map_index)
        return build_context(dag=self.dag, task=task, ti=self.last_ti, dag_run=self.dag_run)

    def run(self, task_id: str, map_index: int = -1) -> Any:
        return execute_task(self.dag.get_task(task_id), self.context(task_id, map_index))

    def xcom(self, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        return self.store[(task_id, map_index, key)]


@pytest.fixture(autouse=True)
def _forget_registered_dags() -> Iterator[None]:
    yield
    pop_registered_dags()


@pytest.fixture
def runner() -> Callable[..., Runner]:
    return Runner


@pytest.fixture
def fake_ti() -> type[FakeTI]:
    return FakeTI
