"""Modules beside the DAGs and in the plugins folder, imported by Celery workers and by
a triggerer in their own processes, as in Airflow."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from tailrace.db.models import DagRun, XCom
from tailrace.testing import run_cli, wait_for

from .conftest import Cluster

FILES = {
    "dist_helpers/__init__.py": "",
    "dist_helpers/maths.py": "def double(n):\n    return 2 * n\n",
    "dist_triggers.py": """
        from tailrace import BaseTrigger, TriggerEvent

        class Once(BaseTrigger):
            def __init__(self, value, **kwargs):
                super().__init__(**kwargs)
                self.value = value

            def serialize(self):
                return ("dist_triggers.Once", {"value": self.value})

            async def run(self):
                yield TriggerEvent(self.value)
    """,
    "dist_dag.py": """
        import pendulum
        from tailrace import BaseOperator, StartTriggerArgs, dag, task
        from dist_helpers.maths import double
        from dist_plugin import label
        from dist_triggers import Once

        class Waits(BaseOperator):
            def execute(self, context):
                self.defer(trigger=Once(value=label(double(21))), method_name="done")

            def done(self, context, event=None):
                return event

        class Starts(BaseOperator):
            start_from_trigger = True
            start_trigger_args = StartTriggerArgs(
                trigger_cls="dist_triggers.Once", trigger_kwargs={"value": "started"}
            )

        @dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="Europe/Paris"))
        def dist_imports():
            @task
            def computed(logical_date=None):
                return [label(double(2)), type(logical_date).__name__]

            computed() >> Waits(task_id="waits") >> Starts(task_id="starts")

        dist_imports()
    """,
}


@pytest.mark.parametrize("db_backend", ["postgres"])
@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_workers_and_the_triggerer_import_modules_beside_the_dags_and_plugins(
    cluster: Cluster, engine: Engine, dags_folder: Path, tmp_path: Path
) -> None:
    for name, source in FILES.items():
        path = dags_folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "dist_plugin.py").write_text("def label(n):\n    return f'n={n}'\n")
    cluster.env["TAILRACE_PLUGINS_FOLDER"] = str(plugins)
    for name in ("api-server", "scheduler", "triggerer", "worker"):
        cluster.start(name, name)
    triggered = run_cli(cluster.env, "dags", "trigger", "dist_imports")
    assert triggered.returncode == 0, triggered.stderr

    def finished() -> str | None:
        with engine.connect() as conn:
            state = conn.scalar(select(DagRun.state).where(DagRun.dag_id == "dist_imports"))
        return state if state in ("success", "failed") else None

    assert wait_for(finished, timeout=120) == "success", cluster.output()
    with engine.connect() as conn:
        values = dict(conn.execute(select(XCom.task_id, XCom.value)).all())
    assert values["computed"] == '["n=4","DateTime"]'
    assert values["waits"] == '"n=42"'


EDITED = """
from datetime import datetime
from tailrace import dag, task
from fresh_helpers.rules import rate

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def fresh_code():
    @task
    def quote():
        return rate()

    quote()

fresh_code()
"""


@pytest.mark.parametrize("db_backend", ["postgres"])
def test_a_helper_edited_between_two_runs_is_the_new_code_on_the_same_celery_worker(
    cluster: Cluster, engine: Engine, dags_folder: Path
) -> None:
    helpers = dags_folder / "fresh_helpers"
    helpers.mkdir()
    (helpers / "__init__.py").write_text("")
    (helpers / "rules.py").write_text("def rate():\n    return 1\n")
    (dags_folder / "fresh_code.py").write_text(EDITED)
    for name in ("api-server", "scheduler", "worker"):
        cluster.start(name, name, *(("--concurrency", "1") if name == "worker" else ()))

    def quotes() -> list[str]:
        with engine.connect() as conn:
            return list(
                conn.scalars(
                    select(XCom.value)
                    .join(DagRun, DagRun.id == XCom.dag_run_id)
                    .where(XCom.task_id == "quote")
                    .order_by(DagRun.id)
                )
            )

    assert run_cli(cluster.env, "dags", "trigger", "fresh_code").returncode == 0
    assert wait_for(lambda: quotes() == ["1"], timeout=120), cluster.output()
    # The same pool process takes the second run (one process): it must not keep the
    # helper it imported for the first.
    (helpers / "rules.py").write_text("def rate():\n    return 2\n")
    assert run_cli(cluster.env, "dags", "trigger", "fresh_code").returncode == 0
    assert wait_for(lambda: len(quotes()) == 2, timeout=120), cluster.output()
    assert quotes() == ["1", "2"]
