"""Strict JSON at the edge: invalid Unicode and non-finite numbers are a 422 naming the
field; every validation error names its field in words, not `body.1` or a pattern."""

from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailrace.api._json import InvalidJson, StrictJsonRoute, loads_strict
from tailrace.api.routes import AUTHENTICATED, auth
from tailrace.testing import DagHarness

from .conftest import Api

JSON_HEADERS = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ('{"conf": {"greeting": "\\ud800"}}', "conf.greeting", "surrogate"),
        ('{"conf": {"rows": [1, "ok", "\\udfff x"]}}', "conf.rows[2]", "surrogate"),
        ('{"conf": {"threshold": NaN}}', "conf.threshold", "NaN is not a finite number"),
        ('{"conf": {"threshold": Infinity}}', "conf.threshold", "Infinity"),
        ('{"conf": {"nested": {"t": -Infinity}}}', "conf.nested.t", "-Infinity"),
        ('{"conf": {"threshold": 1e999}}', "conf.threshold", "1e999"),
        ('{"conf": {"n": ' + "7" * 5000 + "}}", "the request body", "4300 digits"),
    ],
)
def test_invalid_unicode_and_non_finite_numbers_are_a_422_naming_the_field(
    api: Api, harness: DagHarness, raw: str, field: str, words: str
) -> None:
    response = api.admin.post("/dags/api_basic/runs", content=raw, headers=JSON_HEADERS)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert f"{field}: " in error["message"]
    assert words in error["message"]
    assert error["detail"][0]["field"] == field
    assert api.admin.get("/dags/api_basic/runs").json()["items"] == []


def test_a_body_that_is_not_utf8_is_a_422(api: Api) -> None:
    response = api.admin.post("/connections", content=b'{"conn_id": "a\xff"}', headers=JSON_HEADERS)
    assert response.status_code == 422, response.text
    assert "is not UTF-8" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("send", "words"),
    [
        (
            {"json": {"run_id": "a/b"}},
            "run_id: may not hold control characters, '/' or '\\'",
        ),
        ({"content": "{", "headers": JSON_HEADERS}, "the request body: is not valid JSON"),
        ({"json": {"conf": [1, 2]}}, "conf: Input should be a valid dictionary"),
        ({"json": {"colour": "red"}}, "colour: is not a field of this request"),
    ],
)
def test_validation_errors_name_the_field_in_plain_words(
    api: Api, harness: DagHarness, send: dict[str, Any], words: str
) -> None:
    response = api.admin.post("/dags/api_basic/runs", **send)
    assert response.status_code == 422, response.text
    message = response.json()["error"]["message"]
    assert words in message
    assert "body." not in message and "^[" not in message


def test_query_and_path_parameters_are_named_as_such(api: Api) -> None:
    message = api.admin.get("/dags", params={"limit": 0}).json()["error"]["message"]
    assert message.startswith("invalid request: query parameter limit: ")
    message = api.admin.get("/dags/bad%20id").json()["error"]["message"]
    assert "path parameter dag_id: may hold only letters, digits" in message


# --- the parser itself, on any JSON text Python's json module would write -----------------

_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=8)
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


def _problems(value: Any, loc: list[str | int]) -> list[list[str | int]]:
    """Where ``value`` holds something strict JSON refuses (a key's problem is its dict's)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [loc]
    if isinstance(value, str):
        return [] if _is_unicode(value) else [loc]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _problems(item, [*loc, i])]
    if isinstance(value, dict):
        found: list[list[str | int]] = []
        for key, item in value.items():
            found += [loc] if not _is_unicode(key) else _problems(item, [*loc, key])
        return found
    return []


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@given(conf=st.dictionaries(_text, _values, max_size=5))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_conf_parsing_accepts_exactly_the_valid_json_and_names_the_first_bad_field(
    conf: dict[str, Any],
) -> None:
    body = json.dumps({"conf": conf}).encode()  # escapes surrogates, writes NaN
    problems = _problems(conf, ["body", "conf"])
    if not problems:
        assert loads_strict(body) == {"conf": conf}
        return
    with pytest.raises(InvalidJson) as caught:
        loads_strict(body)
    assert caught.value.loc == problems[0]


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def test_any_valid_json_conf_is_stored_as_sent_or_refused_against_the_params(
    api: Api, harness: DagHarness
) -> None:
    """api_basic's params: `greeting`, a string. Whatever JSON conf is sent, the answer is
    a run holding that conf exactly, or a 422 naming the problem; never a server error."""

    @given(conf=st.dictionaries(st.sampled_from(["greeting", "other", "ü"]), _json_values))
    @settings(
        max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(conf: dict[str, Any]) -> None:
        response = api.admin.post("/dags/api_basic/runs", json={"conf": conf})
        if "greeting" in conf and not isinstance(conf["greeting"], str):
            assert response.status_code == 422, response.text
            assert response.json()["error"]["code"] == "invalid_conf"
            assert "greeting" in response.json()["error"]["message"]
            return
        assert response.status_code == 201, response.text
        stored = api.admin.get(f"/dags/api_basic/runs/{quote(response.json()['run_id'], safe='')}")
        assert {k: stored.json()["conf"][k] for k in conf} == conf

    check()


def test_every_api_route_parses_its_body_strictly() -> None:
    routes = [r for router in (*AUTHENTICATED, auth.router) for r in router.routes]
    assert len(routes) > 20
    assert [r.path for r in routes if not isinstance(r, StrictJsonRoute)] == []
