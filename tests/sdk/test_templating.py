from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from tailrace.sdk import DAG, BaseOperator, BashOperator, PythonOperator, task
from tailrace.sdk.errors import TemplateRenderError


class Templated(BaseOperator):
    template_fields: ClassVar[tuple[str, ...]] = ("text", "nested")
    template_ext: ClassVar[tuple[str, ...]] = (".sql",)

    def __init__(self, *, text: Any, nested: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.text = text
        self.nested = nested

    def execute(self, context: Any) -> Any:
        return {"text": self.text, "nested": self.nested}


def test_renders_strings_in_containers(runner: Any) -> None:
    with DAG("tpl", params={"who": "ann"}) as d:
        Templated(
            task_id="t",
            text="{{ ds }} {{ ds_nodash }} {{ params.who }} {{ dag.dag_id }} {{ task.task_id }}",
            nested={
                "k": ["{{ run_id }}", ("{{ ts_nodash }}",)],
                "s": {"{{ ti.map_index }}"},
                "n": 5,
            },
        )
    result = runner(d).run("t")
    assert result["text"] == "2024-03-05 20240305 ann tpl t"
    assert result["nested"] == {"k": ["run1", ("20240305T060708",)], "s": {"-1"}, "n": 5}


def test_rendering_does_not_change_the_dag_task(runner: Any) -> None:
    with DAG("d") as d:
        Templated(task_id="t", text="{{ ds }}", nested=["{{ ds }}"])
    runner(d).run("t")
    op = d.get_task("t")
    assert op.text == "{{ ds }}" and op.nested == ["{{ ds }}"]  # type: ignore[attr-defined]


def test_undefined_renders_empty_not_error(runner: Any) -> None:
    with DAG("d") as d:
        Templated(task_id="t", text="[{{ no_such_thing }}]")
    assert runner(d).run("t")["text"] == "[]"


def test_macros_and_filters(runner: Any) -> None:
    with DAG("d", user_defined_macros={"shout": lambda s: s.upper()}) as d:
        Templated(
            task_id="t",
            text="{{ macros.ds_add(ds, 1) }} {{ macros.json.dumps({'a': 1}) }} "
            "{{ shout('x') }} {{ logical_date | ds_nodash }} "
            "{{ macros.timedelta(days=1).days }} {{ dag_run.conf.get('k') }}",
        )
    assert runner(d, conf={"k": "v"}).run("t")["text"] == '2024-03-06 {"a": 1} X 20240305 1 v'


def test_template_file_from_dag_folder(tmp_path: Path, runner: Any) -> None:
    (tmp_path / "query.sql").write_text("select * from t where ds = '{{ ds }}'")
    with DAG("d", fileloc=str(tmp_path / "dag.py")) as d:
        Templated(task_id="t", text="query.sql")
        Templated(task_id="literal", text="not a file {{ ds }}")
    assert runner(d).run("t")["text"] == "select * from t where ds = '2024-03-05'"
    assert runner(d).run("literal")["text"] == "not a file 2024-03-05"


def test_template_file_from_searchpath(tmp_path: Path, runner: Any) -> None:
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "q.sql").write_text("{{ params.x }}")
    with DAG("d", template_searchpath=str(tmp_path / "sql"), params={"x": 42}) as d:
        Templated(task_id="t", text="q.sql")
    assert runner(d).run("t")["text"] == "42"


def test_missing_template_file_names_task_field_and_searchpath(runner: Any) -> None:
    with DAG("d", fileloc="/nonexistent/dag.py") as d:
        Templated(task_id="t", text="missing.sql")
    with pytest.raises(TemplateRenderError) as info:
        runner(d).run("t")
    message = str(info.value)
    assert "'missing.sql'" in message and "'text'" in message and "'t'" in message
    assert "/nonexistent" in message


def test_template_syntax_error_is_reported(runner: Any) -> None:
    with DAG("d") as d:
        Templated(task_id="t", text="{{ oops ")
    with pytest.raises(TemplateRenderError, match="field 'text' of task 't'"):
        runner(d).run("t")


def test_native_rendering(runner: Any) -> None:
    with DAG("d", render_template_as_native_obj=True, params={"n": 3}) as d:
        Templated(task_id="t", text="{{ params.n + 1 }}")
    assert runner(d).run("t")["text"] == 4


def test_python_operator_templates_and_templates_dict(runner: Any) -> None:
    def f(a: str, b: str, templates_dict: dict[str, str] | None = None) -> str:
        assert templates_dict is not None
        return f"{a}|{b}|{templates_dict['q']}"

    with DAG("d") as d:
        PythonOperator(
            task_id="p",
            python_callable=f,
            op_args=["{{ ds }}"],
            op_kwargs={"b": "{{ run_id }}"},
            templates_dict={"q": "{{ ds_nodash }}"},
        )
    assert runner(d).run("p") == "2024-03-05|run1|20240305"


def test_taskflow_arguments_are_templated(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def echo(x: str) -> str:
            return x

        echo("day {{ ds }}")
    assert runner(d).run("echo") == "day 2024-03-05"


def test_bash_template_file(tmp_path: Path, runner: Any) -> None:
    (tmp_path / "script.sh").write_text("echo from file {{ ds }}\n")
    with DAG("d", fileloc=str(tmp_path / "dag.py")) as d:
        BashOperator(task_id="b", bash_command="script.sh")
    assert runner(d).run("b") == "from file 2024-03-05"


def test_render_template_method(runner: Any) -> None:
    with DAG("d") as d:
        op = Templated(task_id="t", text="")
    context = runner(d).context("t")
    assert op.render_template(["{{ ds }}", 1], context) == ["2024-03-05", 1]


def test_templates_see_pendulum_dates(runner: Any) -> None:
    with DAG("d") as d:
        Templated(
            task_id="t",
            text="{{ logical_date.in_timezone('Asia/Tokyo').to_datetime_string() }} "
            "{{ data_interval_start.add(days=1).to_date_string() }}",
        )
    assert runner(d).run("t")["text"] == "2024-03-05 15:07:08 2024-03-06"
