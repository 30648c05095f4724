"""Variables end to end: a task's Variable.get/set through its owner (a worker has no
database), templates' var.value / var.json, TAILRACE_VAR_<KEY>, masking, the CLI."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from tailrace.db.models import Variable as VariableRow
from tailrace.sdk.errors import VariableNotFoundError
from tailrace.sdk.variables import Variable, masked_value
from tailrace.testing import DagHarness, run_cli
from tailrace.variables import (
    export_variables,
    find_variable,
    import_variables,
    list_variables,
    set_variable,
    variables_from,
)

WriteDag = Callable[[str, str], Path]


def test_a_task_reads_and_writes_variables_through_its_owner(
    harness: DagHarness, write_dag: WriteDag, engine: Engine
) -> None:
    set_variable(engine, "region", "eu-west-1")
    set_variable(engine, "limits", json.dumps({"rows": 5, "api_key": "k-123456789"}))
    set_variable(engine, "db_password", "hunter2-long")
    write_dag(
        "var_dag.py",
        """
import logging
from datetime import datetime
from tailrace import BashOperator, Variable, dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def var_dag():
    @task
    def read():
        limits = Variable.get("limits", deserialize_json=True)
        logging.getLogger("t").info("password is %s", Variable.get("db_password"))
        Variable.set("written", {"by": "read"}, serialize_json=True)
        Variable.delete("gone")
        return [Variable.get("region"), limits["rows"], Variable.get("nope", default="dflt")]

    show = BashOperator(
        task_id="show",
        bash_command="echo {{ var.value.region }}-{{ var.json.limits.rows }}"
        "-{{ var.value.get('nope', 'fallback') }}",
    )
    read() >> show

var_dag()
""",
    )
    set_variable(engine, "gone", "soon")
    harness.parse()
    pk = harness.trigger("var_dag")
    assert harness.run(pk)["state"] == "success"
    assert harness.xcom(pk, "read") == ["eu-west-1", 5, "dflt"]
    assert harness.xcom(pk, "show") == "eu-west-1-5-fallback"
    log = harness.log(pk, "read")
    assert "password is ***" in log and "hunter2-long" not in log
    written = find_variable(engine, "written")
    assert written is not None and json.loads(written.value) == {"by": "read"}
    assert find_variable(engine, "gone") is None


def test_an_environment_variable_wins_and_a_missing_key_names_where_to_set_it(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_variable(engine, "region", "from-db")
    with variables_from(engine):
        assert Variable.get("region") == "from-db"
        monkeypatch.setenv("TAILRACE_VAR_REGION", "from-env")
        assert Variable.get("region") == "from-env"
        with pytest.raises(VariableNotFoundError) as caught:
            Variable.get("missing_key")
    assert isinstance(caught.value, KeyError)
    assert "TAILRACE_VAR_MISSING_KEY" in str(caught.value)
    assert "tailrace variables set missing_key" in str(caught.value)
    with pytest.raises(VariableNotFoundError, match="no metadata database is reachable"):
        Variable.set("x", "y")


def test_values_are_encrypted_at_rest_and_secret_looking_ones_masked(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    set_variable(engine, "service_token", "tok-0123456789")
    with engine.connect() as conn:
        raw = conn.scalar(select(VariableRow.val).where(VariableRow.key == "service_token"))
    assert raw is not None and "tok-0123456789" not in raw
    assert masked_value("service_token", "tok-0123456789") == "***"
    assert masked_value("cfg", '{"host": "h", "password": "pw"}') == (
        '{"host": "h", "password": "***"}'
    )
    assert masked_value("region", "eu") == "eu"
    with variables_from(engine), caplog.at_level(logging.INFO):
        value = Variable.get("service_token")
        logging.getLogger("t").info("token %s", value)
    assert "tok-0123456789" not in caplog.text and "token ***" in caplog.text


def test_import_and_export_round_trip(engine: Engine) -> None:
    assert import_variables(engine, {"a": "text", "b": {"n": 1}, "c": [1, 2]}) == 3
    assert export_variables(engine) == {"a": "text", "b": {"n": 1}, "c": [1, 2]}
    assert [v.key for v in list_variables(engine, after="a", limit=1)] == ["b"]


@pytest.fixture
def cli_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    dags = tmp_path / "dags"
    dags.mkdir()
    return {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags),
        "COLUMNS": "80",
    }


def test_cli_set_get_list_delete_import_export(cli_env: dict[str, str], tmp_path: Path) -> None:
    assert run_cli(cli_env, "variables", "set", "region", "eu-west-1").returncode == 0
    secret = run_cli(cli_env, "variables", "set", "api_key", "k-0987654321", "--description", "x")
    assert secret.returncode == 0 and "k-0987654321" not in secret.stdout
    bad = run_cli(cli_env, "variables", "set", "cfg", "{nope", "--json")
    assert bad.returncode == 1 and "not JSON" in bad.stderr
    env = {**cli_env, "TAILRACE_VAR_FROM_ENV": "e"}
    listed = run_cli(env, "variables", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {"key": "api_key", "value": "***", "description": "x", "source": "database"},
        {
            "key": "from_env",
            "value": "e",
            "description": None,
            "source": "env TAILRACE_VAR_FROM_ENV",
        },
        {"key": "region", "value": "eu-west-1", "description": None, "source": "database"},
    ]
    table = run_cli(env, "variables", "list")
    assert table.returncode == 0 and "k-0987654321" not in table.stdout
    assert all(len(line) <= 80 for line in table.stdout.splitlines())
    assert "region" in table.stdout
    got = run_cli(cli_env, "variables", "get", "api_key")
    assert got.stdout == "k-0987654321\n"
    missing = run_cli(cli_env, "variables", "get", "nope")
    assert missing.returncode == 1 and "TAILRACE_VAR_NOPE" in missing.stderr
    assert run_cli(cli_env, "variables", "get", "nope", "--default", "d").stdout == "d\n"
    exported = tmp_path / "vars.json"
    assert run_cli(cli_env, "variables", "export", str(exported)).returncode == 0
    assert json.loads(exported.read_text()) == {"api_key": "k-0987654321", "region": "eu-west-1"}
    assert run_cli(cli_env, "variables", "delete", "region").returncode == 0
    gone = run_cli(cli_env, "variables", "delete", "region")
    assert gone.returncode == 1 and "no stored variable 'region'" in gone.stderr
    imported = run_cli(cli_env, "variables", "import", str(exported))
    assert imported.returncode == 0 and "2 variables imported" in imported.stdout
    assert run_cli(cli_env, "variables", "get", "region").stdout == "eu-west-1\n"
