"""``/metrics`` on the api-server: every process's values, no login; 404 when off."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tailrace import metrics

from .conftest import Api


@pytest.fixture
def recording(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "metrics"
    directory.mkdir()
    metrics.activate(directory)
    try:
        yield directory
    finally:
        metrics.deactivate()
        os.environ.pop(metrics.DIRECTORY_VARIABLE, None)


def test_metrics_off_is_a_404_that_says_how_to_turn_them_on(api: Api) -> None:
    r = httpx.get(f"{api.server.url}/metrics")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "metrics_disabled"
    assert "TAILRACE_METRICS_ENABLED" in r.json()["error"]["message"]


def test_metrics_need_no_login_and_label_requests_by_route_template(
    recording: Path, api: Api
) -> None:
    assert api.admin.get("/dags/api_basic").status_code in (200, 404)
    assert api.anonymous.get("/dags/no_such_dag").status_code == 401
    r = httpx.get(f"{api.server.url}/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'route="/api/v1/dags/{dag_id}"' in text
    assert "no_such_dag" not in text  # a path's ids never become labels
    assert (
        'tailrace_api_requests_total{method="GET",route="/api/v1/dags/{dag_id}",status="401"}'
        in text
    )
    # Read from the database at scrape time.
    assert "# TYPE tailrace_stream_events_pending gauge" in text
