from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pendulum

from tailrace.sdk import DAG, EmptyOperator
from tailrace.sdk.execution import DagRunInfo, RuntimeTaskInstance, build_context


def make(dag_run: DagRunInfo, fake_ti: Any, params: Any = None) -> Any:
    with DAG("d", params={"p": 1}) as d:
        t = EmptyOperator(task_id="t")
    ti = fake_ti({}, task_id="t", map_index=2, try_number=3)
    return build_context(dag=d, task=t, ti=ti, dag_run=dag_run, params=params), d, t, ti


def test_derived_keys_from_logical_date(fake_ti: Any) -> None:
    when = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    run = DagRunInfo(
        "d",
        "r1",
        logical_date=when,
        data_interval_start=when,
        data_interval_end=datetime(2024, 1, 3, tzinfo=UTC),
        run_type="scheduled",
        conf={"c": 1},
        start_date=datetime(2024, 5, 5, tzinfo=UTC),
    )
    ctx, d, t, ti = make(run, fake_ti)
    assert ctx["ds"] == "2024-01-02" and ctx["ds_nodash"] == "20240102"
    assert ctx["ts"] == "2024-01-02T03:04:05+00:00"
    assert ctx["ts_nodash"] == "20240102T030405"
    assert ctx["ts_nodash_with_tz"] == "20240102T030405+0000"
    assert ctx["dag"] is d and ctx["task"] is t and ctx["ti"] is ti and ctx["task_instance"] is ti
    assert ctx["run_id"] == "r1" and ctx["dag_run"] == run
    assert ctx["logical_date"] == when
    # As in Airflow, the dates are pendulum DateTimes, also on the dag_run.
    for value in (
        ctx["logical_date"],
        ctx["data_interval_start"],
        ctx["data_interval_end"],
        ctx["dag_run"].logical_date,
        ctx["dag_run"].start_date,
    ):
        assert isinstance(value, pendulum.DateTime)
    assert ctx["logical_date"].add(days=1).to_date_string() == "2024-01-03"
    assert ctx["data_interval_end"] == datetime(2024, 1, 3, tzinfo=UTC)
    assert ctx["conf"] == {"c": 1}
    assert ctx["params"] == {"p": 1, "c": 1}  # conf keys join the params, as in Airflow
    assert (ctx["map_index"], ctx["try_number"], ctx["test_mode"]) == (2, 3, False)
    assert ctx["macros"].ds_add("2024-01-31", 1) == "2024-02-01"
    assert isinstance(ti, RuntimeTaskInstance)


def test_without_logical_date_uses_interval_start_then_start_date(fake_ti: Any) -> None:
    start = datetime(2024, 6, 1, tzinfo=UTC)
    ctx, *_ = make(DagRunInfo("d", "r", data_interval_start=start), fake_ti)
    assert ctx["ds"] == "2024-06-01" and ctx["logical_date"] is None
    ctx, *_ = make(DagRunInfo("d", "r", start_date=datetime(2024, 7, 1, tzinfo=UTC)), fake_ti)
    assert ctx["ds"] == "2024-07-01"


def test_explicit_params_win_and_conf_overrides_defaults(fake_ti: Any) -> None:
    ctx, *_ = make(DagRunInfo("d", "r", conf={"p": 5}), fake_ti)
    assert ctx["params"] == {"p": 5}
    ctx, *_ = make(DagRunInfo("d", "r", conf={"p": 5}), fake_ti, params={"p": 9})
    assert ctx["params"] == {"p": 9}


def test_dag_run_info_is_frozen() -> None:
    import dataclasses

    import pytest

    run = DagRunInfo("d", "r")
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.run_id = "x"  # type: ignore[misc]
    assert (run.run_type, run.conf, run.logical_date) == ("manual", {}, None)
