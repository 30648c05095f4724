"""Screenshots of the web UI's main pages for the documentation.

    python -m tailrace.testing.screenshots [--out docs/images]

Starts ``tailrace standalone`` with the bundled examples in a temporary home, triggers a
few runs and saves 1280x800 PNGs of the DAG list, grid, graph, trigger dialog, stream view
and a task's log; then one over tailrace.testing's UI demo DAG (task groups, a failing
mapped instance, XComs) for the run page, the grouped grid and graph, and a task's error and XComs.
Needs Debian's Chromium and the ``playwright`` package (``dev``).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tailrace.testing import _ui_demo as demo
from tailrace.testing._browser import api_client, chromium, log_in, run_to_end, standalone

if TYPE_CHECKING:
    from playwright.sync_api import Page


def take(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    with chromium() as browser:
        page = browser.new_page()

        def shot(name: str) -> None:
            path = out / name
            page.screenshot(path=str(path))
            saved.append(path)

        _examples(page, shot)
        _demo(page, shot)
    return saved


def _examples(page: Page, shot: Callable[[str], None]) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="tailrace-shots-") as home,
        standalone(Path(home)) as app,
        api_client(app) as client,
    ):
        for dag_id, run_id in (("example_etl", "nightly_1"), ("example_iterate", "pages_1")):
            run_to_end(client, dag_id, run_id)
        log_in(page, app.url, "admin", app.admin_password)
        run_to_end(client, "example_iterate", "pages_2")
        page.wait_for_selector("tr[data-dag=example_iterate] .dot.st-success")
        shot("ui-dags.png")

        page.goto(f"{app.url}/#/dags/example_iterate/grid")
        page.wait_for_selector("#grid .cell.mapped")
        shot("ui-grid.png")
        page.goto(f"{app.url}/#/dags/example_iterate/graph")
        page.wait_for_selector("#graph .node.st-success")
        shot("ui-graph.png")

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
        page.click("#logout")


def _demo(page: Page, shot: Callable[[str], None]) -> None:
    with tempfile.TemporaryDirectory(prefix="tailrace-shots-") as home:
        dags = Path(home) / "dags"
        dags.mkdir()
        (dags / "ui_demo.py").write_text(demo.SOURCE)
        with (
            standalone(Path(home), env={"TAILRACE_DAGS_FOLDER": str(dags)}) as app,
            api_client(app) as client,
        ):
            run_to_end(client, demo.DAG_ID, "nightly_1")
            log_in(page, app.url, "admin", app.admin_password)
            runs = f"{app.url}/#/dags/{demo.DAG_ID}/runs/nightly_1"
            page.goto(runs)
            page.wait_for_selector("#task-table .error-summary a")
            shot("ui-run.png")
            page.goto(f"{app.url}/#/dags/{demo.DAG_ID}/grid")
            page.wait_for_selector("#grid tr.group-row")
            shot("ui-grid-groups.png")
            page.goto(f"{app.url}/#/dags/{demo.DAG_ID}/graph")
            page.wait_for_selector("#graph .group-box")
            shot("ui-graph-groups.png")
            page.goto(f"{runs}/tasks/transform.check?map_index=3")
            page.wait_for_selector("pre.error-text")
            page.wait_for_function(
                "() => document.querySelector('#log-state')?.textContent === 'complete'"
            )
            shot("ui-task-error.png")
            page.goto(f"{runs}/tasks/extract")
            page.click("#tab-xcom")
            page.wait_for_selector("#xcom-table")
            shot("ui-task-xcom.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    args = parser.parse_args(argv)
    for path in take(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
