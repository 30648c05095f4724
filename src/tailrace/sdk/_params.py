"""DAG params: named, typed run inputs validated with JSON Schema."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from tailrace.sdk._types import NOTSET, ArgNotSet
from tailrace.sdk.errors import ParamValidationError


class Param:
    """A DAG (or task) param: a default value plus a JSON Schema the value must match.

    ``Param(5, type="integer", minimum=0)``; any JSON Schema keyword (``type``, ``enum``,
    ``minimum``, ``maximum``, ``minLength``, ``pattern``, ``format`` ...) may be given.
    A param without a default is *required*: a run must supply it in its conf.
    """

    def __init__(
        self, default: Any = NOTSET, description: str | None = None, **schema: Any
    ) -> None:
        self.value: Any = default
        self.description = description
        self.schema: dict[str, Any] = dict(schema)

    def __repr__(self) -> str:
        return f"Param({self.value!r}, description={self.description!r}, **{self.schema!r})"

    def __copy__(self) -> Param:
        return Param(self.value, self.description, **self.schema)

    @property
    def has_value(self) -> bool:
        """Whether the param has a default (or resolved) value."""
        return not isinstance(self.value, ArgNotSet)

    def resolve(
        self, value: Any = NOTSET, *, name: str = "<param>", dag_id: str | None = None
    ) -> Any:
        """Validate ``value`` (or the default when not given) and return it.

        Raises :class:`ParamValidationError` naming the param when it fails the schema or
        has no value at all.
        """
        final = self.value if isinstance(value, ArgNotSet) else value
        if isinstance(final, ArgNotSet):
            raise ParamValidationError(
                dag_id=dag_id, param=name, reason="no value was given and it has no default"
            )
        problem = schema_problem(self.schema, final)
        if problem is not None:
            raise ParamValidationError(dag_id=dag_id, param=name, reason=problem)
        return final

    def dump(self) -> dict[str, Any]:
        """The param as plain data: value, description and schema."""
        return {
            "value": None if isinstance(self.value, ArgNotSet) else self.value,
            "description": self.description,
            "schema": dict(self.schema),
        }


def schema_problem(schema: Mapping[str, Any], value: Any) -> str | None:
    """Return why ``value`` fails ``schema`` (``None`` when it is valid)."""
    if not schema:
        return None
    import jsonschema  # imported lazily: slow to import

    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        return f"its schema is invalid: {exc.message}"
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    return f"{value!r} does not match the schema: {error.message}"


class ParamsDict(MutableMapping[str, Any]):
    """A mapping of param names to :class:`Param`; item access returns the param's value.

    Plain values assigned are wrapped in a ``Param`` without a schema.
    """

    def __init__(self, params: Mapping[str, Any] | None = None) -> None:
        self._params: dict[str, Param] = {}
        for key, value in (params or {}).items():
            self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, Param):
            self._params[key] = value
        elif key in self._params:
            self._params[key].value = value
        else:
            self._params[key] = Param(value)

    def __getitem__(self, key: str) -> Any:
        param = self._params[key]
        return None if isinstance(param.value, ArgNotSet) else param.value

    def __delitem__(self, key: str) -> None:
        del self._params[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)

    def __repr__(self) -> str:
        return f"ParamsDict({self._params!r})"

    def __copy__(self) -> ParamsDict:
        return ParamsDict({k: copy.copy(p) for k, p in self._params.items()})

    def get_param(self, key: str) -> Param:
        """The :class:`Param` object named ``key``."""
        return self._params[key]

    def items_params(self) -> Iterator[tuple[str, Param]]:
        """``(name, Param)`` pairs."""
        return iter(self._params.items())

    def merged(self, other: Mapping[str, Any] | None) -> ParamsDict:
        """A copy of these params updated with ``other`` (values or Params)."""
        result = copy.copy(self)
        if isinstance(other, ParamsDict):
            for key, param in other.items_params():
                result[key] = copy.copy(param)
        elif other:
            for key, value in other.items():
                result[key] = value
        return result

    def validate_defaults(self, *, dag_id: str | None = None) -> None:
        """Check each default against its schema; params without a default are allowed."""
        for key, param in self._params.items():
            if param.has_value:
                param.resolve(name=key, dag_id=dag_id)

    def resolve(
        self, conf: Mapping[str, Any] | None = None, *, dag_id: str | None = None
    ) -> dict[str, Any]:
        """The final param values for a run: ``conf`` keys override defaults, then validate.

        As in Airflow, keys of ``conf`` that are not params are added unvalidated.
        """
        conf = conf or {}
        resolved = {
            key: param.resolve(conf.get(key, NOTSET), name=key, dag_id=dag_id)
            for key, param in self._params.items()
        }
        resolved.update((k, v) for k, v in conf.items() if k not in self._params)
        return resolved


class DagParam:
    """A reference to a DAG param, resolved to the run's value when a task runs.

    ``@dag`` passes one for each parameter of the decorated function, so
    ``def pipeline(limit: int = 10)`` gives the DAG a param ``limit`` and tasks called
    with ``limit`` receive the run's value.
    """

    def __init__(self, name: str, default: Any = NOTSET) -> None:
        self.name = name
        self.default = default

    def __repr__(self) -> str:
        return f"DagParam({self.name!r})"

    def resolve(self, context: Mapping[str, Any]) -> Any:
        """The run's value of the param (its default if the run has none)."""
        params = context.get("params") or {}
        if self.name in params:
            return params[self.name]
        if isinstance(self.default, ArgNotSet):
            raise ParamValidationError(
                dag_id=None, param=self.name, reason="the run has no value for it"
            )
        return self.default
