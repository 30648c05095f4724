"""BashOperator: run a bash command in a subprocess."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Container, Mapping
from typing import Any, ClassVar

from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._context import Context
from tailrace.sdk.errors import CommandFailedError, SkipTask, TailraceError

log = logging.getLogger("tailrace.task")


def context_env_vars(context: Context) -> dict[str, str]:
    """``TAILRACE_CTX_*`` variables describing the running task."""
    env: dict[str, str] = {}
    ti = context.get("ti")
    if ti is not None:
        env["TAILRACE_CTX_DAG_ID"] = ti.dag_id
        env["TAILRACE_CTX_TASK_ID"] = ti.task_id
        env["TAILRACE_CTX_RUN_ID"] = ti.run_id
        env["TAILRACE_CTX_TRY_NUMBER"] = str(ti.try_number)
        env["TAILRACE_CTX_MAP_INDEX"] = str(ti.map_index)
    logical_date = context.get("logical_date")
    if logical_date is not None:
        env["TAILRACE_CTX_LOGICAL_DATE"] = logical_date.isoformat()
    return env


class BashOperator(BaseOperator):
    """Run ``bash_command`` with ``bash -c``; the last line of output is the task's XCom.

    Output lines (stdout and stderr) go to the ``tailrace.task`` logger as they appear.
    A non-zero exit code fails the task, except ``skip_on_exit_code`` (default 99), which
    skips it. ``env`` replaces the process environment unless ``append_env=True``.
    ``bash_command`` may name a ``.sh``/``.bash`` template file next to the DAG file.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("bash_command", "env", "cwd")
    template_fields_renderers: ClassVar[dict[str, str]] = {"bash_command": "bash", "env": "json"}
    template_ext: ClassVar[tuple[str, ...]] = (".sh", ".bash")
    ui_color = "#f0ede4"

    def __init__(
        self,
        *,
        bash_command: str,
        env: Mapping[str, str] | None = None,
        append_env: bool = False,
        output_encoding: str = "utf-8",
        skip_on_exit_code: int | Container[int] | None = 99,
        cwd: str | None = None,
        output_processor: Callable[[str], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bash_command = bash_command
        self.env = dict(env) if env is not None else None
        self.append_env = append_env
        self.output_encoding = output_encoding
        if skip_on_exit_code is None:
            self.skip_on_exit_code: Container[int] = ()
        elif isinstance(skip_on_exit_code, int):
            self.skip_on_exit_code = (skip_on_exit_code,)
        else:
            self.skip_on_exit_code = skip_on_exit_code
        self.cwd = cwd
        self.output_processor = output_processor
        self._process: subprocess.Popen[bytes] | None = None

    def get_env(self, context: Context) -> dict[str, str]:
        """The environment of the command."""
        if self.env is None:
            env = dict(os.environ)
        elif self.append_env:
            env = {**os.environ, **self.env}
        else:
            env = dict(self.env)
        env.update(context_env_vars(context))
        return env

    def execute(self, context: Context) -> Any:
        if self.cwd is not None and not os.path.isdir(self.cwd):
            raise TailraceError(
                f"Task '{self.task_id}': cwd {self.cwd!r} is not an existing directory",
                hint="Pass an existing directory as cwd.",
            )
        command = self.bash_command
        if not isinstance(command, str) or not command.strip():
            raise TailraceError(
                f"Task '{self.task_id}': bash_command is empty or not a string ({command!r})",
                hint="Pass the command to run as a non-empty string.",
            )
        last_line = self._run(command, self.get_env(context))
        return self.output_processor(last_line) if self.output_processor else last_line

    def _run(self, command: str, env: dict[str, str]) -> str:
        bash = shutil.which("bash") or "bash"
        last_line = ""
        with subprocess.Popen(
            [bash, "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self.cwd,
            env=env,
            start_new_session=True,
        ) as process:
            self._process = process
            try:
                assert process.stdout is not None
                for raw in process.stdout:
                    line = raw.decode(self.output_encoding, "backslashreplace").rstrip("\r\n")
                    log.info("%s", line)
                    last_line = line
                exit_code = process.wait()
            except BaseException:
                self.on_kill()
                raise
            finally:
                self._process = None
        if exit_code in self.skip_on_exit_code:
            raise SkipTask(f"Bash command returned exit code {exit_code}; skipping the task.")
        if exit_code != 0:
            raise CommandFailedError(task_id=self.task_id, exit_code=exit_code)
        return last_line

    def on_kill(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(process.pid), signal.SIGTERM)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(os.getpgid(process.pid), signal.SIGKILL)
                process.wait()
