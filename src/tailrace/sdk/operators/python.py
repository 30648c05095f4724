"""Operators that call a Python function: plain, branching and short-circuiting, and in
another interpreter (a cached virtualenv's, or an existing one)."""

from __future__ import annotations

import functools
import inspect
import logging
import os
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._branch import SkipMixin, branch_skip_ids, short_circuit_skip_ids
from tailrace.sdk._callbacks import refuse_non_default
from tailrace.sdk._context import Context
from tailrace.sdk.errors import DagDefinitionError, SkipTask

log = logging.getLogger("tailrace.task")


def determine_kwargs(
    func: Callable[..., Any], args: Collection[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments to call ``func`` with: all of ``kwargs`` if it takes
    ``**kwargs``, else those it names (minus the ones ``args`` fill positionally)."""
    try:
        positional, any_keyword, names = _parameters_of(func)
    except TypeError:  # an unhashable callable: nothing to cache it by
        positional, any_keyword, names = _parameters_of.__wrapped__(func)
    taken = set(positional[: len(args)])
    if any_keyword:
        return {k: v for k, v in kwargs.items() if k not in taken}
    return {k: v for k, v in kwargs.items() if k in names and k not in taken}


@functools.lru_cache(maxsize=256)  # inspect.signature per call cost a no-op task ~10 %
def _parameters_of(func: Callable[..., Any]) -> tuple[tuple[str, ...], bool, frozenset[str]]:
    """``func``'s leading positional parameter names, whether it takes ``**kwargs``, and
    the names it takes by keyword."""
    params = list(inspect.signature(func).parameters.values())
    positional = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        positional.append(p.name)
    keyword = frozenset(
        p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )
    return tuple(positional), any(p.kind == p.VAR_KEYWORD for p in params), keyword


class PythonOperator(BaseOperator):
    """Call ``python_callable(*op_args, **op_kwargs)``; its return value is the task's XCom.

    Context entries (``ti``, ``ds``, ``params`` ...) are passed to the callable for the
    parameters named like them, or all of them if it takes ``**kwargs``. ``op_args``,
    ``op_kwargs`` and ``templates_dict`` are templated.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("templates_dict", "op_args", "op_kwargs")
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "templates_dict": "json",
        "op_args": "py",
        "op_kwargs": "py",
    }
    ui_color = "#ffefeb"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        templates_dict: dict[str, Any] | None = None,
        show_return_value_in_logs: bool = True,
        **kwargs: Any,
    ) -> None:
        if not callable(python_callable):
            raise DagDefinitionError(
                f"python_callable must be callable, got {type(python_callable).__name__}",
                task_id=kwargs.get("task_id"),
                field="python_callable",
            )
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.op_args = list(op_args or ())
        self.op_kwargs = dict(op_kwargs or {})
        self.templates_dict = templates_dict
        self.show_return_value_in_logs = show_return_value_in_logs

    def execute(self, context: Context) -> Any:
        context["templates_dict"] = self.templates_dict
        available: dict[str, Any] = {**context, **self.op_kwargs}
        kwargs = determine_kwargs(self.python_callable, self.op_args, available)
        result = self.python_callable(*self.op_args, **kwargs)
        if self.show_return_value_in_logs:
            log.info("Done. Returned value was: %r", result)
        return result


class BaseBranchOperator(BaseOperator, SkipMixin):
    """A task that chooses which of its direct downstream tasks run; the rest are skipped.

    Implement :meth:`choose_branch` returning a task id, a task group id (meaning the
    group's first tasks), a list of them, or ``None`` (skip all).
    """

    @abstractmethod
    def choose_branch(self, context: Context) -> str | Iterable[str] | None:
        """Return the id(s) of the downstream tasks to follow."""

    def do_branch(self, context: Context, branches: str | Iterable[str] | None) -> None:
        """Skip the direct downstream tasks not in ``branches``."""
        self.skip(context, branch_skip_ids(self, branches))

    def execute(self, context: Context) -> Any:
        branches = self.choose_branch(context)
        self.do_branch(context, branches)
        return branches


class BranchPythonOperator(BaseBranchOperator, PythonOperator):
    """Follow the task id(s) ``python_callable`` returns; skip the other downstream tasks."""

    def choose_branch(self, context: Context) -> str | Iterable[str] | None:
        result: str | Iterable[str] | None = PythonOperator.execute(self, context)
        return result


class ShortCircuitOperator(PythonOperator, SkipMixin):
    """Continue only if ``python_callable`` returns a truthy value.

    On a falsy value every downstream task is skipped (with
    ``ignore_downstream_trigger_rules=False`` only the direct ones, leaving the rest to
    their trigger rules).
    """

    def __init__(self, *, ignore_downstream_trigger_rules: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ignore_downstream_trigger_rules = ignore_downstream_trigger_rules

    def execute(self, context: Context) -> Any:
        condition = super().execute(context)
        if condition:
            log.info("Condition result is %r; downstream tasks proceed.", condition)
            return condition
        to_skip = short_circuit_skip_ids(self, self.ignore_downstream_trigger_rules)
        log.info("Condition result is %r; skipping downstream tasks %s", condition, sorted(to_skip))
        self.skip(context, to_skip)
        return condition


# Context values a callable in another interpreter may name (Airflow's serializable
# context keys that Tailrace has, all JSON): Tailrace is not installed there to build the
# rest.
VIRTUALENV_CONTEXT_KEYS = frozenset(
    {
        "ds",
        "ds_nodash",
        "ts",
        "ts_nodash",
        "ts_nodash_with_tz",
        "run_id",
        "map_index",
        "params",
        "templates_dict",
    }
)

# Annotations stay unevaluated: they may name types only the DAG file imports.
# ``virtualenv_string_args`` is Airflow's global for ``string_args``.
_SCRIPT = """\
from __future__ import annotations

import json
import sys

{source}

with open(sys.argv[1], encoding="utf-8") as _tailrace_in:
    _tailrace_args = json.load(_tailrace_in)
virtualenv_string_args = _tailrace_args["string_args"]
_tailrace_result = {name}(*_tailrace_args["args"], **_tailrace_args["kwargs"])
with open(sys.argv[2], "w", encoding="utf-8") as _tailrace_out:
    json.dump(_tailrace_result, _tailrace_out)
"""


def callable_source(python_callable: Callable[..., Any], *, task_id: str | None) -> str:
    """The function's own source, without its decorators (``@task.virtualenv``)."""
    import ast
    import textwrap

    try:
        source = textwrap.dedent(inspect.getsource(python_callable))
    except (OSError, TypeError):
        raise DagDefinitionError(
            f"the source of {python_callable!r} cannot be read, so it cannot run in another "
            "interpreter",
            task_id=task_id,
            field="python_callable",
            hint="Define it with def in the DAG file (not a lambda, a builtin or a callable "
            "object).",
        ) from None
    tree = ast.parse(source)
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef) or function.name != python_callable.__name__:
        raise DagDefinitionError(
            f"{python_callable!r} is not a function defined with def",
            task_id=task_id,
            field="python_callable",
            hint="Define it with def in the DAG file.",
        )
    if inspect.isgeneratorfunction(python_callable):
        raise DagDefinitionError(
            f"{python_callable.__name__} yields, and a generator's items cannot cross back "
            "from another interpreter",
            task_id=task_id,
            field="python_callable",
            hint="Return a list instead.",
        )
    function.decorator_list = []
    return ast.unparse(function)


def _exit_codes(skip_on_exit_code: int | Collection[int] | None) -> frozenset[int]:
    if skip_on_exit_code is None:
        return frozenset()
    if isinstance(skip_on_exit_code, int):
        return frozenset({skip_on_exit_code})
    return frozenset(skip_on_exit_code)


class _BasePythonVirtualenvOperator(PythonOperator):
    """Run the callable's source in a subprocess of the Python :meth:`interpreter` names,
    its arguments and return value crossing as JSON: what the virtualenv and the
    external-Python operators share."""

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        string_args: Iterable[str] | None = None,
        env_vars: dict[str, str] | None = None,
        inherit_env: bool = True,
        skip_on_exit_code: int | Collection[int] | None = None,
        **kwargs: Any,
    ) -> None:
        self._source = callable_source(python_callable, task_id=kwargs.get("task_id"))
        super().__init__(python_callable=python_callable, **kwargs)
        self.string_args = list(string_args or ())
        self.env_vars = dict(env_vars or {})
        self.inherit_env = inherit_env
        self.skip_on_exit_code = _exit_codes(skip_on_exit_code)

    @abstractmethod
    def interpreter(self) -> Path:
        """The Python that runs the callable (made ready first if need be)."""

    def execute(self, context: Context) -> Any:
        context["templates_dict"] = self.templates_dict
        available = {k: v for k, v in context.items() if k in VIRTUALENV_CONTEXT_KEYS}
        kwargs = determine_kwargs(
            self.python_callable, self.op_args, {**available, **self.op_kwargs}
        )
        result = self.run_callable(list(self.op_args), kwargs)
        if self.show_return_value_in_logs:
            log.info("Done. Returned value was: %r", result)
        return result

    def run_callable(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the function's source in :meth:`interpreter`, with ``args`` and ``kwargs``."""
        import subprocess
        import tempfile

        import msgspec

        from tailrace.sdk.timezone import json_default

        python = self.interpreter()
        encode = msgspec.json.Encoder(enc_hook=json_default).encode  # XCom's encoding
        # Airflow writes the strings one a line and reads them back stripped.
        lines = [line.strip() for line in "\n".join(map(str, self.string_args)).splitlines()]
        with tempfile.TemporaryDirectory(prefix="tailrace-venv-") as tmp:
            folder = Path(tmp)
            (folder / "script.py").write_text(
                _SCRIPT.format(source=self._source, name=self.python_callable.__name__)
            )
            try:
                payload = encode({"args": args, "kwargs": kwargs, "string_args": lines})
            except (TypeError, msgspec.EncodeError) as exc:
                raise TypeError(
                    f"the arguments of {self.task_id} must be JSON-serializable to reach "
                    f"its interpreter: {exc}"
                ) from None
            (folder / "args.json").write_bytes(payload)
            done = subprocess.run(
                [str(python), *(str(folder / f) for f in ("script.py", "args.json", "out.json"))],
                capture_output=True,
                text=True,
                env={**(os.environ if self.inherit_env else {}), **self.env_vars},
                cwd=tmp,
                check=False,
            )
            for line in (done.stdout + done.stderr).splitlines():
                log.info("%s", line)
            if done.returncode in self.skip_on_exit_code:
                raise SkipTask(f"the callable's process exited with {done.returncode}")
            if done.returncode != 0:
                raise RuntimeError(
                    f"the callable failed in {python} (exit code {done.returncode}); its "
                    "output is above"
                )
            if not (folder / "out.json").exists():
                raise RuntimeError(
                    f"{python} exited without running the callable's script: is it Python?"
                )
            return msgspec.json.decode((folder / "out.json").read_bytes())


class PythonVirtualenvOperator(_BasePythonVirtualenvOperator):
    """Run ``python_callable`` in a virtualenv with ``requirements`` installed, in a
    subprocess (Airflow's operator of that name; ``@task.virtualenv`` is its decorator).

    The function's source runs there, not the function object: it must import what it
    uses inside its body. Its arguments (``op_args``, ``op_kwargs``, the context values it
    names among ``ds``, ``ts``, ``run_id``, ``params``, ``templates_dict`` …) go in as
    JSON, as XComs are stored, and its return value comes back as JSON and becomes its
    XCom. ``string_args`` become the global ``virtualenv_string_args`` there (a list of
    str, one per line), as in Airflow; an exit code in ``skip_on_exit_code`` skips the
    task. Environments are cached by a hash of the requirements (and ``python_version``,
    ``system_site_packages``, ``pip_install_options``, ``index_urls``) under
    ``venv_cache_path`` (default ``$TAILRACE_HOME/venvs``): only the first run of a set of
    requirements installs them.
    """

    template_fields: ClassVar[tuple[str, ...]] = (
        "requirements",
        "index_urls",
        *PythonOperator.template_fields,
    )

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        requirements: Iterable[str] | str | None = None,
        python_version: str | None = None,
        system_site_packages: bool = True,
        pip_install_options: list[str] | None = None,
        index_urls: Collection[str] | str | None = None,
        venv_cache_path: os.PathLike[str] | str | None = None,
        expect_airflow: bool = False,
        **kwargs: Any,
    ) -> None:
        if python_version is not None and not isinstance(python_version, str):
            raise DagDefinitionError(
                f"python_version must be a string such as '3.12', got {python_version!r}",
                task_id=kwargs.get("task_id"),
                field="python_version",
            )
        super().__init__(python_callable=python_callable, **kwargs)
        refuse_non_default(
            "PythonVirtualenvOperator",
            {"expect_airflow": expect_airflow},
            dag_id=self.dag_id,
            task_id=self.task_id,
        )
        if not requirements:
            self.requirements: list[str] = []
        elif isinstance(requirements, str):
            self.requirements = [requirements]
        else:
            self.requirements = list(requirements)
        self.python_version = python_version
        self.system_site_packages = system_site_packages
        self.pip_install_options = list(pip_install_options or ())
        self.index_urls = [index_urls] if isinstance(index_urls, str) else list(index_urls or ())
        self.venv_cache_path = venv_cache_path

    def interpreter(self) -> Path:
        """The cached virtualenv's Python, built first if it is not there yet."""
        from tailrace.sdk._virtualenv import VenvSpec, ensure_venv

        spec = VenvSpec(
            requirements=tuple(self.requirements),
            python_version=self.python_version,
            system_site_packages=self.system_site_packages,
            pip_install_options=tuple(self.pip_install_options),
            index_urls=tuple(self.index_urls),
        )
        cache = Path(self.venv_cache_path) if self.venv_cache_path else None
        python, built = ensure_venv(spec, cache)
        log.info("%s virtualenv %s", "Created" if built else "Reusing", python.parent.parent)
        return python


class ExternalPythonOperator(_BasePythonVirtualenvOperator):
    """Run ``python_callable`` in an existing interpreter, ``python`` (an absolute path
    such as a virtualenv's ``bin/python``; templated), in a subprocess: Airflow's operator
    of that name; ``@task.external_python`` is its decorator.

    As ``PythonVirtualenvOperator``, with nothing built or installed: the function's
    source runs there with its arguments and return value as JSON, ``string_args``,
    ``skip_on_exit_code``, ``env_vars`` and ``inherit_env`` work the same, and Tailrace
    need not be installed in that interpreter. A ``python`` that is not an executable file
    on the worker fails the task naming it.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("python", *PythonOperator.template_fields)

    def __init__(
        self,
        *,
        python: str | None = None,
        python_callable: Callable[..., Any],
        expect_airflow: bool = False,
        expect_pendulum: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(python_callable=python_callable, **kwargs)
        refuse_non_default(
            "ExternalPythonOperator",
            {"expect_airflow": expect_airflow, "expect_pendulum": expect_pendulum},
            dag_id=self.dag_id,
            task_id=self.task_id,
        )
        self.python = _python_path(python, dag_id=self.dag_id, task_id=self.task_id)

    def interpreter(self) -> Path:
        """``python``, checked to be an executable file on this worker."""
        from tailrace.sdk._virtualenv import existing_interpreter

        return existing_interpreter(
            self.python, where=f"DAG '{self.dag_id}', task '{self.task_id}'"
        )


def _python_path(python: object, *, dag_id: str | None, task_id: str) -> str:
    hint = "Pass the absolute path of the interpreter, such as python='/opt/venv/bin/python'."
    if not isinstance(python, str) or not python.strip():
        raise DagDefinitionError(
            f"python must be the path of a Python interpreter, got {python!r}",
            dag_id=dag_id,
            task_id=task_id,
            field="python",
            hint=hint,
        )
    if "{{" not in python and not os.path.isabs(python):  # a template is checked rendered
        raise DagDefinitionError(
            f"python={python!r} is not an absolute path",
            dag_id=dag_id,
            task_id=task_id,
            field="python",
            hint=hint,
        )
    return python


class BranchPythonVirtualenvOperator(BaseBranchOperator, PythonVirtualenvOperator):
    """Follow the task id(s) ``python_callable`` returns from its virtualenv; skip the
    other downstream tasks (``@task.branch_virtualenv`` is its decorator)."""

    def choose_branch(self, context: Context) -> str | Iterable[str] | None:
        result: str | Iterable[str] | None = PythonVirtualenvOperator.execute(self, context)
        return result


class BranchExternalPythonOperator(BaseBranchOperator, ExternalPythonOperator):
    """Follow the task id(s) ``python_callable`` returns from its interpreter; skip the
    other downstream tasks (``@task.branch_external_python`` is its decorator)."""

    def choose_branch(self, context: Context) -> str | Iterable[str] | None:
        result: str | Iterable[str] | None = ExternalPythonOperator.execute(self, context)
        return result
