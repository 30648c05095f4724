"""Variables: a key-value store of settings that tasks and templates read by key.

A variable ``my_key`` comes from, in order:

1. the environment variable ``TAILRACE_VAR_MY_KEY`` (the key upper-cased, as Airflow's
   ``AIRFLOW_VAR_<KEY>``), read in the process that needs it;
2. the metadata database (``tailrace variables set``): a worker asks its owner (its pipe
   or the execution API — workers have no database access); the triggerer and
   ``tailrace tasks test`` read the database themselves.

``Variable.set`` and ``Variable.delete`` write the database the same way, through the
owner. A value whose key looks like a secret's (``api_key``, ``db_password``) is
registered with the log masker when read, so logs print ``***`` in its place; a JSON
value's entries under secret-looking keys are too.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Protocol

from tailrace.sdk._masking import MASK, is_secret_name, mask_secret
from tailrace.sdk._types import NOTSET
from tailrace.sdk.errors import VariableNotFoundError

__all__ = [  # noqa: RUF022 - grouped by concept
    "Variable",
    "VariableAccessor",
    "env_var_name",
    "masked_value",
    # for the runtime
    "VariableSource",
    "set_variable_source",
]

ENV_PREFIX = "TAILRACE_VAR_"


class VariableSource(Protocol):
    """Where this process finds, stores and deletes variables that no environment
    variable defines (the metadata database, directly or through a worker's owner)."""

    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str, description: str | None) -> None: ...

    def delete(self, key: str) -> bool: ...


_source_lock = threading.Lock()
_source: VariableSource | None = None


def set_variable_source(source: VariableSource | None) -> VariableSource | None:
    """Install this process's variable source; returns the previous one, to restore it."""
    global _source
    with _source_lock:
        previous, _source = _source, source
    return previous


def env_var_name(key: str) -> str:
    """``TAILRACE_VAR_<KEY>``: the environment variable that defines ``key``."""
    return ENV_PREFIX + key.upper()


def _require_source(key: str, action: str) -> VariableSource:
    source = _source
    if source is None:
        raise VariableNotFoundError(
            key,
            env_var_name(key),
            reason=f"cannot {action} variable {key!r} here: no metadata database is reachable "
            "(this code does not run in a task, a trigger or `tailrace tasks test`)",
        )
    return source


def _mask(key: str, raw: str, value: Any) -> None:
    if is_secret_name(key):
        mask_secret(raw)
        if isinstance(value, str):
            mask_secret(value)
    _mask_nested(value)


def _mask_nested(value: Any) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str) and is_secret_name(str(k)):
                mask_secret(v)
            else:
                _mask_nested(v)
    elif isinstance(value, list):
        for item in value:
            _mask_nested(item)


def masked_value(key: str, value: str) -> str:
    """``value`` as the CLI, the API and the UI show it: ``***`` when the key looks like a
    secret's, a JSON object's secret-looking entries masked, else as it is."""
    if is_secret_name(key):
        return MASK
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    if not isinstance(parsed, dict | list):
        return value
    masked = _masked_json(parsed)
    return value if masked == parsed else json.dumps(masked)


def _masked_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: MASK if isinstance(v, str) and is_secret_name(str(k)) else _masked_json(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked_json(v) for v in value]
    return value


class Variable:
    """Airflow's ``Variable``: ``Variable.get("key")``, ``Variable.set("key", value)``.

    Values are stored as text; ``deserialize_json=True`` / ``serialize_json=True`` read
    and write JSON.
    """

    def __init__(self, key: str, value: Any = None, description: str | None = None) -> None:
        self.key = key
        self.value = value
        self.description = description

    def __repr__(self) -> str:
        return f"Variable(key={self.key!r})"

    @classmethod
    def get(cls, key: str, default: Any = NOTSET, deserialize_json: bool = False) -> Any:
        """The value of ``key``: from ``TAILRACE_VAR_<KEY>``, else the metadata database.

        Raises :class:`~tailrace.sdk.errors.VariableNotFoundError` (a ``KeyError``) when
        neither has it and no ``default`` is given.
        """
        raw = os.environ.get(env_var_name(key))
        if raw is None:
            source = _source
            raw = source.get(key) if source is not None else None
        if raw is None:
            if default is not NOTSET:
                return default
            raise VariableNotFoundError(key, env_var_name(key))
        value: Any = raw
        if deserialize_json:
            try:
                value = json.loads(raw)
            except ValueError as exc:
                raise VariableNotFoundError(
                    key,
                    env_var_name(key),
                    reason=f"variable {key!r} is not valid JSON ({exc}), but was read with "
                    "deserialize_json=True",
                ) from None
        _mask(key, raw, value)
        return value

    @classmethod
    def set(
        cls, key: str, value: Any, description: str | None = None, serialize_json: bool = False
    ) -> None:
        """Store ``value`` under ``key`` in the metadata database (replacing it).

        A value that is not a string needs ``serialize_json=True``, as in Airflow.
        """
        if serialize_json:
            text = json.dumps(value, indent=2)
        elif isinstance(value, str):
            text = value
        else:
            raise TypeError(
                f"Variable.set({key!r}, ...) got a {type(value).__name__}; pass a str, or "
                "serialize_json=True to store it as JSON"
            )
        _require_source(key, "set").set(key, text, description)

    @classmethod
    def delete(cls, key: str) -> None:
        """Delete ``key`` from the metadata database (nothing happens if it is not there)."""
        _require_source(key, "delete").delete(key)


class VariableAccessor:
    """``{{ var.value.key }}`` and ``{{ var.json.key }}`` in templates (and
    ``var.value.get('key', 'default')``)."""

    def __init__(self, *, deserialize_json: bool) -> None:
        self._deserialize_json = deserialize_json

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__"):
            raise AttributeError(key)
        return Variable.get(key, deserialize_json=self._deserialize_json)

    def __getitem__(self, key: str) -> Any:
        return Variable.get(key, deserialize_json=self._deserialize_json)

    def get(self, key: str, default: Any = None) -> Any:
        return Variable.get(key, default, deserialize_json=self._deserialize_json)

    def __repr__(self) -> str:
        return f"<VariableAccessor {'json' if self._deserialize_json else 'value'}>"
