from __future__ import annotations

import copy
from typing import Any

import pytest

from tailrace.sdk import DAG, NOTSET, Param, ParamsDict, task
from tailrace.sdk.errors import ParamValidationError


def test_params_dict_wraps_values_and_returns_values() -> None:
    params = ParamsDict({"a": 1, "b": Param("x", type="string", description="B")})
    assert params["a"] == 1 and params["b"] == "x"
    assert params.get_param("b").description == "B"
    assert params.get_param("a").schema == {}
    params["b"] = "y"
    assert params.get_param("b").schema == {"type": "string"}  # keeps the schema
    assert dict(params) == {"a": 1, "b": "y"}
    assert len(params) == 2 and "a" in params


def test_resolve_conf_overrides_then_validates() -> None:
    d = DAG(
        "pd",
        params={
            "n": Param(5, type="integer", minimum=1, maximum=10),
            "mode": Param("fast", enum=["fast", "slow"]),
            "free": "anything",
        },
    )
    assert d.resolve_params({}) == {"n": 5, "mode": "fast", "free": "anything"}
    assert d.resolve_params({"n": 7, "extra": True}) == {
        "n": 7,
        "mode": "fast",
        "free": "anything",
        "extra": True,
    }
    with pytest.raises(ParamValidationError) as info:
        d.resolve_params({"n": 11})
    assert info.value.param == "n" and info.value.dag_id == "pd"
    assert "'n'" in str(info.value) and "pd" in str(info.value) and "maximum" in str(info.value)
    with pytest.raises(ParamValidationError, match="'mode'"):
        d.resolve_params({"mode": "medium"})


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "string", "minLength": 3}, "abc", "ab"),
        ({"type": "string", "pattern": "^[a-z]+$"}, "abc", "ABC"),
        ({"type": "number", "minimum": 0}, 0.5, -1),
        ({"type": "array", "items": {"type": "integer"}}, [1, 2], [1, "x"]),
        ({"type": ["null", "integer"]}, None, "x"),
        ({"type": "string", "format": "date"}, "2024-01-31", "2024-13-45"),
    ],
)
def test_json_schema_keywords(schema: dict[str, Any], good: Any, bad: Any) -> None:
    param = Param(good, **schema)
    assert param.resolve(name="p") == good
    with pytest.raises(ParamValidationError, match="'p'"):
        param.resolve(bad, name="p")


def test_param_without_default_is_required_at_trigger_time_only() -> None:
    d = DAG("req", params={"must": Param(type="integer", description="needed")})
    d.validate()  # parse time: fine
    assert not d.params.get_param("must").has_value
    assert d.params["must"] is None
    with pytest.raises(ParamValidationError) as info:
        d.resolve_params({})
    assert "'must'" in str(info.value) and "no value" in str(info.value)
    assert d.resolve_params({"must": 3}) == {"must": 3}
    assert Param().value is NOTSET


def test_invalid_schema_is_reported() -> None:
    with pytest.raises(ParamValidationError, match="schema is invalid"):
        Param(1, type="no-such-type").resolve(name="p")


def test_param_copy_and_dump() -> None:
    p = Param(1, description="d", type="integer")
    q = copy.copy(p)
    q.value = 2
    assert p.value == 1
    assert p.dump() == {"value": 1, "description": "d", "schema": {"type": "integer"}}


def test_task_params_merge_with_dag_params_and_conf(runner: Any) -> None:
    with DAG("d", params={"a": 1, "b": Param(2, type="integer")}) as d:

        @task(params={"a": 3, "c": 4})
        def show(params: dict[str, Any] | None = None) -> Any:
            return params

        show()
    assert dict(d.get_task("show").params) == {"a": 3, "b": 2, "c": 4}  # type: ignore[attr-defined]
    assert dict(d.params) == {"a": 1, "b": 2}
    assert runner(d).run("show") == {"a": 3, "b": 2, "c": 4}
    assert runner(d, conf={"a": 10}).run("show") == {"a": 10, "b": 2, "c": 4}
    with pytest.raises(ParamValidationError, match="'b'"):
        runner(d, conf={"b": "not int"}).run("show")
