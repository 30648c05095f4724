"""Operators that call a Python function: plain, branching and short-circuiting."""

from __future__ import annotations

import inspect
import logging
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, ClassVar

from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._branch import SkipMixin, branch_skip_ids, short_circuit_skip_ids
from tailrace.sdk._context import Context
from tailrace.sdk.errors import DagDefinitionError

log = logging.getLogger("tailrace.task")


def determine_kwargs(
    func: Callable[..., Any], args: Collection[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments to call ``func`` with: all of ``kwargs`` if it takes
    ``**kwargs``, else those it names (minus the ones ``args`` fill positionally)."""
    params = list(inspect.signature(func).parameters.values())
    taken = {
        p.name
        for p in params[: len(args)]
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    }
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return {k: v for k, v in kwargs.items() if k not in taken}
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in kwargs.items() if k in names and k not in taken}


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
