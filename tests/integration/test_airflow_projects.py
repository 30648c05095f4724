"""Small Airflow-style projects, parsed and run as they are: helper modules and a trigger
module beside the DAGs, a plugins folder, pendulum dates and a time-zone cron schedule,
ignore files, a start-from-trigger operator without execute(), and files that kill, hang
or flood their parser beside good ones."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from sqlalchemy import Engine, select

from tailrace.dag_processing import DagFileProcessor, ParseOptions, parse_in_subprocess
from tailrace.db.models import Dag, DagVersion, ImportError_
from tailrace.scheduler.schedules import next_scheduled
from tailrace.serialization import SerializedDag, loads
from tailrace.testing import DagHarness, FakeClock, run_cli


def write(root: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))


# Module names are unique to this file: the triggerer runs in the test process, where
# imported modules stay in sys.modules from one test to the next.
PROJECT = {
    "proj_common/__init__.py": "",
    "proj_common/utils.py": """
        def greeting(name):
            return f"hello {name}"
    """,
    "proj_triggers.py": """
        from tailrace import BaseTrigger, TriggerEvent

        class EchoTrigger(BaseTrigger):
            def __init__(self, value, **kwargs):
                super().__init__(**kwargs)
                self.value = value

            def serialize(self):
                return ("proj_triggers.EchoTrigger", {"value": self.value})

            async def run(self):
                yield TriggerEvent({"echo": self.value})
    """,
    "project_dag.py": """
        import pendulum
        from tailrace import BaseOperator, StartTriggerArgs, dag, task
        from proj_common.utils import greeting
        from proj_plugin_helpers import suffix
        from proj_triggers import EchoTrigger


        class Defers(BaseOperator):
            def execute(self, context):
                self.defer(
                    trigger=EchoTrigger(value=context["logical_date"].add(days=1)),
                    method_name="done",
                )

            def done(self, context, event=None):
                return event


        class StartsInTriggerer(BaseOperator):
            # No execute(): the trigger's event ends the task.
            start_from_trigger = True
            start_trigger_args = StartTriggerArgs(
                trigger_cls="proj_triggers.EchoTrigger", trigger_kwargs={"value": "started"}
            )


        @dag(
            schedule="0 9 * * *",
            start_date=pendulum.datetime(2026, 3, 27, 9, tz="Europe/Amsterdam"),
            catchup=True,
            params={"since": pendulum.datetime(2026, 1, 1, tz="UTC")},
        )
        def project():
            @task
            def greet(**context):
                when = context["logical_date"]
                return {
                    "text": greeting("tailrace") + suffix(),
                    "pendulum": type(when).__module__.startswith("pendulum"),
                    "tomorrow": when.add(days=1),
                    "since": context["params"]["since"],
                }

            greet() >> Defers(task_id="defers") >> StartsInTriggerer(task_id="starts")


        project()
    """,
}
PLUGINS = {"proj_plugin_helpers.py": 'def suffix():\n    return "!"\n'}


@pytest.fixture
def project(engine: Engine, dags_folder: Path, tmp_path: Path) -> Iterator[DagHarness]:
    plugins = tmp_path / "plugins"
    write(dags_folder, PROJECT)
    write(plugins, PLUGINS)
    options = ParseOptions(plugins_folder=str(plugins), paused_at_creation=False)
    clock = FakeClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    with DagHarness(
        engine, dags_folder, log_folder=tmp_path / "logs", parse_options=options, clock=clock
    ) as h:
        yield h


def serialized(engine: Engine, dag_id: str) -> SerializedDag:
    with engine.connect() as conn:
        data = conn.scalar(
            select(DagVersion.data)
            .join(Dag, Dag.latest_version_id == DagVersion.id)
            .where(Dag.dag_id == dag_id)
        )
    return msgspec.convert(loads(data), SerializedDag)


def test_a_project_with_helpers_plugins_and_a_trigger_module_parses_and_runs(
    project: DagHarness,
) -> None:
    report = project.parse()
    with project.engine.connect() as conn:
        assert conn.execute(select(ImportError_.filename, ImportError_.message)).all() == []
    assert report.dags == 1
    import pendulum

    # pendulum values as a run's logical date and in its conf, from Python.
    pk = project.trigger(
        "project",
        {"since": pendulum.datetime(2026, 2, 1, tz="UTC")},
        logical_date=pendulum.datetime(2026, 3, 28, 9, tz="Europe/Amsterdam"),
    )
    summary = project.run(pk)
    assert summary["state"] == "success", project.states(pk)
    greeted = project.xcom(pk, "greet")
    assert greeted["text"] == "hello tailrace!"
    assert greeted["pendulum"] is True
    # pendulum values in XCom are stored as their ISO text, as datetimes are.
    assert greeted["tomorrow"] == "2026-03-29T08:00:00Z"
    assert greeted["since"] == "2026-02-01T00:00:00Z"  # the conf's, through JSON
    # The trigger ran from its module beside the DAGs, in the triggerer.
    assert project.xcom(pk, "defers") == {"echo": "2026-03-29T08:00:00Z"}
    assert project.states(pk)["starts"] == "success"
    assert project.task_instance(pk, "starts").id not in project.dispatched  # no worker


def test_the_dags_time_zone_drives_its_cron_schedule_across_the_dst_change(
    project: DagHarness,
) -> None:
    project.parse()
    dag = serialized(project.engine, "project")
    assert dag.timezone == "Europe/Amsterdam"
    # 09:00 in Amsterdam: 08:00 UTC in CET, 07:00 UTC once CEST starts on 29 March 2026.
    with project.engine.connect() as conn:
        first = conn.scalar(select(Dag.next_dagrun).where(Dag.dag_id == "project"))
    assert first is not None and first.replace(tzinfo=UTC) == datetime(2026, 3, 27, 8, tzinfo=UTC)
    dates = [first.replace(tzinfo=UTC)]
    for _ in range(3):
        following = next_scheduled(dag, dates[-1], datetime(2026, 4, 1, tzinfo=UTC))
        assert following is not None
        dates.append(following)
    assert dates == [
        datetime(2026, 3, 27, 8, tzinfo=UTC),
        datetime(2026, 3, 28, 8, tzinfo=UTC),
        datetime(2026, 3, 29, 7, tzinfo=UTC),
        datetime(2026, 3, 30, 7, tzinfo=UTC),
    ]


GOOD = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def {name}():
    @task
    def hello():
        return "hi"
    hello()

{name}()
"""


@pytest.mark.parametrize(
    ("syntax", "patterns"),
    [
        ("glob", "# generated code\nignored_*.py\nvendor/\n!ignored_but_kept.py\n"),
        ("regexp", "# generated code\nignored_(?!but)\nvendor\n"),
    ],
)
def test_ignore_files_in_both_syntaxes_leave_matching_files_unparsed(
    dags_folder: Path, syntax: str, patterns: str
) -> None:
    write(
        dags_folder,
        {
            "kept.py": GOOD.format(name="kept"),
            "ignored_one.py": "raise RuntimeError('dag: must not be imported')",
            "ignored_but_kept.py": GOOD.format(name="but_kept"),
            "vendor/thing.py": "raise RuntimeError('dag: must not be imported')",
            "team/.airflowignore": "local_only" if syntax == "regexp" else "local_only*",
            "team/local_only_dag.py": "raise RuntimeError('dag: must not be imported')",
            "team/team_dag.py": GOOD.format(name="team_dag"),
            ".airflowignore": patterns,
        },
    )
    results = parse_in_subprocess(str(dags_folder), options=ParseOptions(ignore_file_syntax=syntax))
    parsed = {Path(r.path).relative_to(dags_folder).as_posix(): r for r in results}
    assert sorted(parsed) == ["ignored_but_kept.py", "kept.py", "team/team_dag.py"]
    assert all(not r.errors for r in results)


def test_tailraceignore_is_read_beside_airflowignore(dags_folder: Path) -> None:
    write(
        dags_folder,
        {
            "a_dag.py": GOOD.format(name="a"),
            "b_dag.py": GOOD.format(name="b"),
            "c_dag.py": GOOD.format(name="c"),
            ".airflowignore": "a_*\n",
            ".tailraceignore": "b_*\n",
        },
    )
    assert [Path(r.path).name for r in parse_in_subprocess(str(dags_folder))] == ["c_dag.py"]


HOSTILE = {
    "a_good_dag.py": GOOD.format(name="first"),
    "exits_dag.py": "import os\nos._exit(7)  # dag\n",
    "swallows_dag.py": """
        # dag: a loop that swallows the parser's timeout
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass
    """,
    "floods_dag.py": "# dag\nwhile True:\n    print('x' * 1000)\n",
    "killed_dag.py": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)  # dag\n",
    "z_good_dag.py": GOOD.format(name="last"),
}


def test_files_that_kill_hang_or_flood_their_parser_fail_alone_and_named(
    harness: DagHarness, dags_folder: Path
) -> None:
    write(dags_folder, HOSTILE)
    harness.processor.options = ParseOptions(import_timeout=1, paused_at_creation=False)
    report = harness.parse()
    assert report.dags == 2
    with harness.engine.connect() as conn:
        errors = {Path(r.filename).name: r.message for r in conn.execute(select(ImportError_))}
        active = set(conn.scalars(select(Dag.dag_id).where(Dag.is_active.is_(True))))
    assert active == {"first", "last"}
    assert set(errors) == {"exits_dag.py", "swallows_dag.py", "floods_dag.py", "killed_dag.py"}
    assert "exited with code 7 while importing" in errors["exits_dag.py"]
    assert str(dags_folder / "exits_dag.py") in errors["exits_dag.py"]
    assert "killed by SIGKILL" in errors["killed_dag.py"]
    assert "catches BaseException" in errors["swallows_dag.py"]
    # Interrupted at its deadline, the flooding file's last output is kept, bounded.
    assert "took longer than 1s" in errors["floods_dag.py"]
    with harness.engine.connect() as conn:
        trace = conn.scalar(
            select(ImportError_.stacktrace).where(ImportError_.filename.like("%floods_dag.py"))
        )
    printed = trace.split("Output:\n", 1)[1]
    assert set(printed.strip()) <= {"x", "\n"} and len(printed) <= 2000
    assert harness.trigger_and_run("last")["state"] == "success"


def test_only_changed_files_are_parsed_again(dags_folder: Path, tmp_path: Path) -> None:
    write(
        dags_folder,
        {
            "one_dag.py": GOOD.format(name="one"),
            "two_dag.py": GOOD.format(name="two"),
            "helpers_mod/__init__.py": "",
            "helpers_mod/names.py": "NAME = 'x'\n",
        },
    )
    processor = DagFileProcessor(str(dags_folder))
    processor.parse()
    assert sorted(Path(p).name for p in processor.reparsed) == ["one_dag.py", "two_dag.py"]
    processor.parse()
    assert processor.reparsed == []
    # A file that failed is tried again each time (its cause may have been passing).
    (dags_folder / "flaky_dag.py").write_text("raise ConnectionError('dag: service down')\n")
    processor.parse()
    processor.parse()
    assert [Path(p).name for p in processor.reparsed] == ["flaky_dag.py"]
    (dags_folder / "flaky_dag.py").unlink()
    processor.parse()
    (dags_folder / "two_dag.py").write_text(GOOD.format(name="two").replace("hi", "hey"))
    processor.parse()
    assert [Path(p).name for p in processor.reparsed] == ["two_dag.py"]
    # A helper module may be imported by any DAG file: every one is parsed again.
    (dags_folder / "helpers_mod" / "names.py").write_text("NAME = 'changed'\n")
    processor.parse()
    assert sorted(Path(p).name for p in processor.reparsed) == ["one_dag.py", "two_dag.py"]
    (dags_folder / "one_dag.py").unlink()
    assert [Path(r.path).name for r in processor.parse()] == ["two_dag.py"]
    assert processor.reparsed == []


def test_the_cli_names_a_file_that_kills_its_parser_without_a_traceback(
    database_url: str, tmp_path: Path
) -> None:
    dags = tmp_path / "cli_dags"
    write(
        dags,
        {"good_dag.py": GOOD.format(name="cli_first"), "exits_dag.py": HOSTILE["exits_dag.py"]},
    )
    env = {
        **os.environ,
        "TAILRACE_HOME": str(tmp_path / "home"),
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags),
        "COLUMNS": "200",
    }
    out = run_cli(env, "dags", "list-import-errors", "--json")
    assert out.returncode == 1, out.stderr  # there are import errors (as Airflow's CLI)
    assert "Traceback" not in out.stdout + out.stderr
    [error] = json.loads(out.stdout)
    assert error["filename"] == str((dags / "exits_dag.py").resolve())
    assert "exited with code 7" in error["message"]
    listing = json.loads(run_cli(env, "dags", "list", "--json").stdout)
    # Airflow's default: a new DAG starts paused.
    assert [(d["dag_id"], d["paused"]) for d in listing] == [("cli_first", True)]
    env["TAILRACE_DAGS_ARE_PAUSED_AT_CREATION"] = "false"
    (dags / "second_dag.py").write_text(textwrap.dedent(GOOD.format(name="cli_second")))
    listing = json.loads(run_cli(env, "dags", "list", "--json").stdout)
    assert [(d["dag_id"], d["paused"]) for d in listing] == [
        ("cli_first", True),
        ("cli_second", False),
    ]


def test_is_paused_upon_creation_overrides_the_setting(
    harness: DagHarness, dags_folder: Path
) -> None:
    source = GOOD.format(name="held").replace(
        "@dag(schedule=None,", "@dag(is_paused_upon_creation=True, schedule=None,"
    )
    write(dags_folder, {"held_dag.py": source})
    harness.parse()  # the fixture's setting: new DAGs unpaused
    with harness.engine.connect() as conn:
        assert conn.scalar(select(Dag.is_paused).where(Dag.dag_id == "held")) is True


def test_a_bad_regexp_in_an_ignore_file_is_that_files_error(
    harness: DagHarness, dags_folder: Path
) -> None:
    write(
        dags_folder,
        {
            "kept_dag.py": GOOD.format(name="kept_by_regexp"),
            "skip_me_dag.py": "raise RuntimeError('dag: must not be imported')",
            ".airflowignore": "# two patterns, one broken\ntenant_[\\d\nskip_me\n",
        },
    )
    harness.processor.options = ParseOptions(ignore_file_syntax="regexp", paused_at_creation=False)
    report = harness.parse()
    assert report.dags == 1
    with harness.engine.connect() as conn:
        [(filename, line, message)] = conn.execute(
            select(ImportError_.filename, ImportError_.line, ImportError_.message)
        ).all()
    assert (Path(filename).name, line) == (".airflowignore", 2)
    assert "'tenant_[\\\\d' is not a regular expression" in message
    # Fixed, the error goes.
    (dags_folder / ".airflowignore").write_text("skip_me\n")
    harness.parse()
    with harness.engine.connect() as conn:
        assert conn.execute(select(ImportError_)).all() == []
