from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from tailrace.sdk import DAG, BashOperator, SkipTask, task
from tailrace.sdk.errors import CommandFailedError, TailraceError


def run_bash(runner: Any, **kwargs: Any) -> Any:
    with DAG("bash_dag") as d:
        BashOperator(task_id="b", **kwargs)
    r = runner(d)
    return r.run("b"), r


def test_returns_and_pushes_last_line(runner: Any) -> None:
    result, r = run_bash(runner, bash_command="echo one; echo two")
    assert result == "two" and r.xcom("b") == "two"


def test_streams_output_lines_to_task_logger(runner: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tailrace.task"):
        run_bash(runner, bash_command="echo out; echo err >&2")
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "tailrace.task"]
    assert "out" in lines and "err" in lines


def test_nonzero_exit_fails_with_code(runner: Any) -> None:
    with pytest.raises(CommandFailedError) as info:
        run_bash(runner, bash_command="echo partial; exit 3")
    assert info.value.exit_code == 3 and info.value.task_id == "b"
    assert "exit code 3" in str(info.value)


def test_skip_on_exit_code(runner: Any) -> None:
    with pytest.raises(SkipTask, match="99"):
        run_bash(runner, bash_command="exit 99")
    with pytest.raises(SkipTask, match="5"):
        run_bash(runner, bash_command="exit 5", skip_on_exit_code=[5, 6])
    with pytest.raises(CommandFailedError):
        run_bash(runner, bash_command="exit 99", skip_on_exit_code=None)


def test_env_replaces_or_appends(runner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FROM_PARENT", "parent")
    result, _ = run_bash(
        runner, bash_command='echo "${FROM_PARENT:-unset}-$MINE"', env={"MINE": "{{ ds_nodash }}"}
    )
    assert result == "unset-20240305"
    result, _ = run_bash(
        runner, bash_command='echo "$FROM_PARENT-$MINE"', env={"MINE": "x"}, append_env=True
    )
    assert result == "parent-x"
    result, _ = run_bash(runner, bash_command='echo "$FROM_PARENT"')
    assert result == "parent"


def test_context_env_vars(runner: Any) -> None:
    result, _ = run_bash(runner, bash_command='echo "$TAILRACE_CTX_DAG_ID/$TAILRACE_CTX_TASK_ID"')
    assert result == "bash_dag/b"


def test_cwd(runner: Any, tmp_path: Path) -> None:
    result, _ = run_bash(runner, bash_command="pwd", cwd=str(tmp_path))
    assert Path(result).resolve() == tmp_path.resolve()
    with pytest.raises(TailraceError, match="cwd"):
        run_bash(runner, bash_command="pwd", cwd=str(tmp_path / "missing"))


def test_output_processor(runner: Any) -> None:
    result, _ = run_bash(runner, bash_command="echo 41", output_processor=lambda s: int(s) + 1)
    assert result == 42


def test_task_bash_decorator(runner: Any) -> None:
    with DAG("d") as d:

        @task.bash
        def greet(name: str) -> str:
            return f"echo hello {name} {{{{ ds }}}}"

        greet("ann")
    assert runner(d).run("greet") == "hello ann 2024-03-05"


def test_task_bash_must_return_a_command(runner: Any) -> None:
    with DAG("d") as d:

        @task.bash
        def nothing() -> str:
            return ""

        nothing()
    with pytest.raises(TypeError, match="non-empty string"):
        runner(d).run("nothing")
