"""A try's templated fields as rendered reach rendered_task_instance_fields through the
worker's report (no worker database connection), one row per try, masked."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

from tailrace.db.models import RenderedTaskInstanceFields
from tailrace.execution._worker import RENDERED_FIELD_MAX_CHARS
from tailrace.testing import TimeSkippingHarness

Open = Callable[..., TimeSkippingHarness]

DAGS = """
from datetime import timedelta

from tailrace import DAG, Param, task
from tailrace.sdk.operators import BashOperator
from tailrace.sdk._masking import mask_secret


def token():
    mask_secret("s3cr3t-token")  # as a hook registers a password it reads
    return "s3cr3t-token"


with DAG(
    "templated",
    schedule=None,
    params={"region": Param("eu")},
    user_defined_macros={"var_token": token},
):
    say = BashOperator(
        task_id="say",
        # Fails on try 1, succeeds on try 2, a minute later.
        bash_command="test {{ ti.try_number }} -gt 1 && echo {{ params.region }} {{ ds }}",
        env={"TOKEN": "{{ var_token() }}", "LONG": "{{ 'x' * 5000 }}"},
        retries=1,
        retry_delay=timedelta(minutes=1),
    )

    @task
    def add(a, b):
        return a + b

    say >> add(1, b=2)
"""


def _rows(env: TimeSkippingHarness, run: int, task_id: str) -> dict[int, dict[str, str]]:
    ti = env.task_instance(run, task_id)
    with env.engine.connect() as conn:
        return {
            r.try_number: r.rendered_fields
            for r in conn.execute(
                select(RenderedTaskInstanceFields).where(
                    RenderedTaskInstanceFields.task_instance_id == ti.id
                )
            )
        }


def test_rendered_fields_are_stored_per_try_masked_and_cut(
    time_skipping: Open, tmp_path: Path
) -> None:
    (tmp_path / "templated.py").write_text(DAGS)
    env = time_skipping(tmp_path / "templated.py", start=datetime(2026, 5, 4, tzinfo=UTC))
    run = env.trigger_and_run("templated", {"region": "us"})
    env.assert_task_states(run, {"say": "success", "add": "success"})
    say = _rows(env, run, "say")
    assert sorted(say) == [1, 2]
    assert say[1]["bash_command"] == "test 1 -gt 1 && echo us 2026-05-04"
    assert say[2]["bash_command"] == "test 2 -gt 1 && echo us 2026-05-04"
    assert say[2]["cwd"] == "null"
    env_text = say[2]["env"]
    assert "s3cr3t-token" not in env_text and "***" in env_text
    assert len(env_text) < RENDERED_FIELD_MAX_CHARS + 100 and "cut: " in env_text
    add = _rows(env, run, "add")
    assert add[1]["op_args"] == "[1]" and add[1]["op_kwargs"] == '{"b":2}'
