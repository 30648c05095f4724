"""Screenshots of the web UI's main pages for the documentation.

    python -m tailrace.testing.screenshots [--out docs/images]

Starts ``tailrace standalone`` with the bundled examples in a temporary home, triggers a
few runs and saves 1280x800 PNGs of the DAG list, grid, graph, trigger dialog, run, stream
view and a task's log. Needs Debian's Chromium and the ``playwright`` package (``dev``).
"""

from __future__ import annotations

import argparse
import functools
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from tailrace.testing._browser import Standalone, chromium, log_in, standalone
from tailrace.testing._wait import wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Page


def _client(app: Standalone) -> httpx.Client:
    token = httpx.post(
        f"{app.url}/api/v1/auth/token",
        json={"username": "admin", "password": app.admin_password},
    ).json()["access_token"]
    return httpx.Client(
        base_url=f"{app.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def _finished(client: httpx.Client, dag_id: str, run_id: str) -> bool:
    state = client.get(f"/dags/{dag_id}/runs/{run_id}").json()["state"]
    return state in ("success", "failed")


def _trigger(client: httpx.Client, dag_id: str, run_id: str, conf: dict[str, object]) -> str:
    r = client.post(f"/dags/{dag_id}/runs", json={"run_id": run_id, "conf": conf})
    r.raise_for_status()
    return run_id


def _number(page: Page, selector: str) -> int:
    text = page.inner_text(selector).replace(",", "")
    return int(text) if text.isdigit() else 0


def take(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    with (
        tempfile.TemporaryDirectory(prefix="tailrace-shots-") as home,
        standalone(Path(home)) as app,
        _client(app) as client,
        chromium() as browser,
    ):
        for dag_id, run_id in (("example_etl", "nightly_1"), ("example_iterate", "pages_1")):
            _trigger(client, dag_id, run_id, {})
            wait_for(functools.partial(_finished, client, dag_id, run_id), timeout=120)
        _trigger(client, "example_iterate", "pages_2", {})
        page = browser.new_page()

        def shot(name: str) -> None:
            path = out / name
            page.screenshot(path=str(path))
            saved.append(path)

        log_in(page, app.url, "admin", app.admin_password)
        wait_for(lambda: _finished(client, "example_iterate", "pages_2"), timeout=120)
        page.wait_for_selector("tr[data-dag=example_iterate] .dot.st-success")
        shot("ui-dags.png")

        page.goto(f"{app.url}/#/dags/example_iterate/grid")
        page.wait_for_selector("#grid .cell.mapped")
        shot("ui-grid.png")
        page.goto(f"{app.url}/#/dags/example_iterate/graph")
        page.wait_for_selector("#graph .node.st-success")
        shot("ui-graph.png")
        page.goto(f"{app.url}/#/dags/example_iterate/runs/pages_2")
        page.wait_for_selector("#task-table .countsbar")
        shot("ui-run.png")

        page.goto(f"{app.url}/#/dags/example_streaming")
        page.click("button[data-trigger=example_streaming]")
        page.fill("#run-id", "stream_demo")
        page.fill("#conf", '{\n  "pages": 150,\n  "page_latency": 0.1\n}')
        shot("ui-trigger.png")
        page.click("#trigger-submit")
        page.wait_for_selector("#stream-view-link")
        page.click("#stream-view-link")
        page.wait_for_function(
            "() => Number(document.querySelector('#produced-fetch_pages')?.textContent) >= 60"
        )
        shot("ui-stream.png")
        page.click("[data-stream=fetch_pages] h2 a")
        page.wait_for_function("() => document.querySelector('#log')?.textContent.length > 500")
        shot("ui-task-log.png")
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    args = parser.parse_args(argv)
    for path in take(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
