"""Rendering templated task fields with Jinja."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.nativetypes

from tailrace.sdk._params import DagParam
from tailrace.sdk._xcom_arg import XComArg
from tailrace.sdk.errors import TemplateRenderError

if TYPE_CHECKING:
    from tailrace.sdk._context import Context


def _ds(value: datetime) -> str:
    return value.strftime("%Y-%m-%d")


def _ds_nodash(value: datetime) -> str:
    return value.strftime("%Y%m%d")


def _ts(value: datetime) -> str:
    return value.isoformat()


def _ts_nodash(value: datetime) -> str:
    return value.strftime("%Y%m%dT%H%M%S")


FILTERS: dict[str, Callable[..., Any]] = {
    "ds": _ds,
    "ds_nodash": _ds_nodash,
    "ts": _ts,
    "ts_nodash": _ts_nodash,
}


def create_environment(
    *,
    searchpath: Sequence[str] = (),
    undefined: type[jinja2.Undefined] | None = None,
    native: bool = False,
    macros: Mapping[str, Any] | None = None,
    filters: Mapping[str, Callable[..., Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> jinja2.Environment:
    """A Jinja environment loading template files from ``searchpath``."""
    cls = jinja2.nativetypes.NativeEnvironment if native else jinja2.Environment
    options: dict[str, Any] = {
        "loader": jinja2.FileSystemLoader(list(searchpath)),
        "undefined": undefined or jinja2.Undefined,
        "extensions": ["jinja2.ext.do"],
        "cache_size": 0,
        "keep_trailing_newline": True,
    }
    options.update(extra or {})
    env = cls(**options)
    env.filters.update(FILTERS)
    env.filters.update(filters or {})
    env.globals.update(macros or {})
    return env


def render_value(
    value: Any,
    context: Context,
    env: jinja2.Environment,
    *,
    template_ext: Sequence[str] = (),
    seen: set[int] | None = None,
) -> Any:
    """Render ``value``: strings as Jinja templates (or template files when they end with
    one of ``template_ext``), XComArgs by pulling them, containers item by item."""
    seen = seen if seen is not None else set()
    if id(value) in seen:  # e.g. values pulled from XCom for a mapped task: never re-rendered
        return value
    if isinstance(value, str):
        if template_ext and value.endswith(tuple(template_ext)):
            template = env.get_template(value)
        else:
            template = env.from_string(value)
        return template.render(dict(context))
    if isinstance(value, XComArg | DagParam):
        return value.resolve(context)
    if isinstance(value, tuple):
        if hasattr(value, "_fields"):  # namedtuple
            return type(value)(
                *(
                    render_value(v, context, env, template_ext=template_ext, seen=seen)
                    for v in value
                )
            )
        return tuple(
            render_value(v, context, env, template_ext=template_ext, seen=seen) for v in value
        )
    if isinstance(value, list):
        return [render_value(v, context, env, template_ext=template_ext, seen=seen) for v in value]
    if isinstance(value, dict):
        return {
            k: render_value(v, context, env, template_ext=template_ext, seen=seen)
            for k, v in value.items()
        }
    if isinstance(value, set | frozenset):
        return type(value)(
            render_value(v, context, env, template_ext=template_ext, seen=seen) for v in value
        )
    nested_fields = getattr(value, "template_fields", None)
    if nested_fields and not isinstance(value, type):
        value = copy.copy(value)  # never change the DAG's own objects
        seen.add(id(value))
        for field in nested_fields:
            setattr(
                value,
                field,
                render_value(
                    getattr(value, field), context, env, template_ext=template_ext, seen=seen
                ),
            )
    return value


def render_field(
    task_id: str,
    field: str,
    value: Any,
    context: Context,
    env: jinja2.Environment,
    template_ext: Sequence[str],
    seen: set[int] | None = None,
) -> Any:
    """Render one field, turning Jinja failures into :class:`TemplateRenderError`."""
    try:
        return render_value(value, context, env, template_ext=template_ext, seen=seen)
    except jinja2.TemplateNotFound as exc:
        raise TemplateRenderError(
            task_id=task_id,
            field=field,
            reason=f"template file {exc.name!r} not found in {_searchpath(env)}",
            hint="Put the file next to the DAG file or in the DAG's template_searchpath; "
            "to use a string ending in an extension such as '.sh' literally, add a space.",
        ) from exc
    except jinja2.TemplateError as exc:
        raise TemplateRenderError(task_id=task_id, field=field, reason=str(exc)) from exc


def _searchpath(env: jinja2.Environment) -> list[str]:
    loader = env.loader
    if isinstance(loader, jinja2.FileSystemLoader):
        return list(loader.searchpath)
    return []
