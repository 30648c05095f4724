"""docs/airflow-compatibility.md against Airflow's own task SDK: every public name and
parameter of Airflow 3's authoring API is supported or refused, refusals raise named
errors, and the page is what tailrace.testing.airflow_compat writes."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import tailrace
from tailrace import (
    DAG,
    DateTimeSensor,
    EmptyOperator,
    ExternalPythonOperator,
    ExternalTaskSensor,
    FileSensor,
    HITLOperator,
    PythonOperator,
    PythonVirtualenvOperator,
    TriggerDagRunOperator,
    task,
)
from tailrace.sdk._callbacks import DEFAULT_ONLY_ARGS, REFUSED_ARGS
from tailrace.sdk.errors import UnsupportedArgumentError, UnsupportedNameError
from tailrace.testing import airflow_compat
from tailrace.testing.airflow_compat import Entry

ROOT = airflow_compat.airflow_root()
if ROOT is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError(
            f"{airflow_compat.PACKAGES} are not installed; scripts/install-airflow-sdk does it"
        )
    pytest.skip("Airflow's task SDK is not installed", allow_module_level=True)
assert ROOT is not None
ENTRIES = list(airflow_compat.entries(ROOT))


def test_airflow_is_read_whole() -> None:
    sections = {e.section for e in ENTRIES}
    assert {"name", "DAG", "BaseOperator", "BaseSensorOperator", "BashOperator"} <= sections
    names = {e.name for e in ENTRIES if e.section == "name"}
    assert {"DAG", "Variable", "TriggerDagRunOperator", "task.virtualenv", "setup"} <= names
    assert len([e for e in ENTRIES if e.section == "BaseOperator"]) > 40


def test_every_airflow_name_and_parameter_is_supported_or_refused() -> None:
    gaps = [f"{e.section}: {e.name}" for e in ENTRIES if e.status is None]
    assert gaps == [], "add each to tailrace.sdk or to a refusal table in sdk/_callbacks.py"


@pytest.mark.parametrize(
    "entry",
    [e for e in ENTRIES if e.section == "name" and e.status == "supported"],
    ids=lambda e: e.name,
)
def test_a_supported_name_imports(entry: Entry) -> None:
    if entry.name.startswith("task."):
        assert callable(getattr(task, entry.name.removeprefix("task.")))
    else:
        assert getattr(tailrace, entry.name) is not None


@pytest.mark.parametrize(
    "entry",
    [e for e in ENTRIES if e.section == "name" and e.status == "refused"],
    ids=lambda e: e.name,
)
def test_a_refused_name_raises_naming_it_and_what_to_do(entry: Entry) -> None:
    with pytest.raises(UnsupportedNameError) as caught:
        if entry.name.startswith("task."):
            getattr(task, entry.name.removeprefix("task."))
        else:
            getattr(tailrace, entry.name)
    assert isinstance(caught.value, ImportError)
    assert str(caught.value).startswith(f"{entry.name} (from Airflow) is not supported")
    assert entry.note in str(caught.value)


def _in_a_virtualenv() -> int:
    return 1


def _make(owner: str, **extra: Any) -> None:
    with (
        DAG("compat_refusal", schedule=None)
        if owner != "DAG"
        else DAG("compat_refusal", schedule=None, **extra)
    ):
        if owner == "BaseOperator":
            EmptyOperator(task_id="t", **extra)
        elif owner == "BaseSensorOperator":
            DateTimeSensor(task_id="t", target_time=datetime(2026, 1, 1), **extra)
        elif owner == "FileSensor":
            FileSensor(task_id="t", filepath="x", **extra)
        elif owner == "PythonOperator":
            PythonOperator(task_id="t", python_callable=print, **extra)
        elif owner == "PythonVirtualenvOperator":
            PythonVirtualenvOperator(task_id="t", python_callable=_in_a_virtualenv, **extra)
        elif owner == "ExternalPythonOperator":
            ExternalPythonOperator(
                task_id="t", python="/usr/bin/python3", python_callable=_in_a_virtualenv, **extra
            )
        elif owner == "HITLOperator":
            HITLOperator(task_id="t", subject="?", options=["yes"], **extra)
        elif owner == "TriggerDagRunOperator":
            TriggerDagRunOperator(task_id="t", trigger_dag_id="other", **extra)
        elif owner == "ExternalTaskSensor":
            ExternalTaskSensor(task_id="t", external_dag_id="other", **extra)


@pytest.mark.parametrize(
    ("owner", "argument"),
    [(owner, arg) for owner, table in REFUSED_ARGS.items() for arg in table],
)
def test_a_refused_argument_raises_naming_it_and_what_to_do(owner: str, argument: str) -> None:
    with pytest.raises(UnsupportedArgumentError) as caught:
        _make(owner, **{argument: "some value"})
    assert caught.value.field == argument
    assert caught.value.dag_id == "compat_refusal"
    assert REFUSED_ARGS[owner][argument] in str(caught.value)


@pytest.mark.parametrize(
    ("owner", "argument"),
    [(owner, arg) for owner, table in DEFAULT_ONLY_ARGS.items() for arg in table],
)
def test_a_default_only_argument_raises_when_given_a_value(owner: str, argument: str) -> None:
    _make(owner)  # the default is fine
    with pytest.raises(UnsupportedArgumentError) as caught:
        _make(owner, **{argument: "some value"})
    assert caught.value.field == argument
    assert DEFAULT_ONLY_ARGS[owner][argument] in str(caught.value)


def test_an_argument_nobody_takes_is_still_an_error() -> None:
    with pytest.raises(Exception, match=r"Invalid arguments were passed to DAG: \['nope'\]"):
        _make("DAG", nope=1)


def test_the_page_is_current() -> None:
    page = Path(airflow_compat.DOC).read_text()
    assert page == airflow_compat.render(ENTRIES), (
        "docs/airflow-compatibility.md is stale: run python -m tailrace.testing.airflow_compat"
    )
