"""The web UI in headless Chromium against `tailrace standalone`: what a first-time user does."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tailrace.testing._browser import Standalone, log_in

from .conftest import VIEWER

SLOW_STREAM = '{"pages": 60, "page_latency": 0.1}'


def _number(page: Page, selector: str) -> int:
    return int(page.inner_text(selector).replace(",", ""))


def _open_stream_view(page: Page) -> None:
    """From a run just triggered in the dialog: its run page, then its stream view."""
    expect(page.locator("#task-table")).to_be_visible()
    page.click("#stream-view-link")


def test_log_in_trigger_the_streaming_example_watch_its_stream_and_read_a_log(
    app: Standalone, browser: Any
) -> None:
    page: Page = browser.new_page()
    page.goto(f"{app.url}/")
    expect(page.locator("form.login")).to_be_visible()  # not logged in: the login form
    page.fill("#username", "admin")
    page.fill("#password", "wrong")
    page.click("button[type=submit]")
    expect(page.locator(".error")).to_contain_text("wrong username or password")
    log_in(page, app.url, "admin", app.admin_password)
    expect(page.locator("#user")).to_contain_text("admin")
    expect(page.locator("tr[data-dag=example_streaming]")).to_be_visible()

    page.click("button[data-trigger=example_streaming]")
    conf = page.locator("#conf")
    expect(conf).to_have_value(re.compile(r'"pages": 20'))  # the DAG's params, as defaults
    conf.fill('{"pages": ')
    expect(page.locator("#conf-problem")).to_contain_text("Not valid JSON")
    expect(page.locator("#trigger-submit")).to_be_disabled()
    conf.fill('{"pages": "many"}')
    page.click("#trigger-submit")
    expect(page.locator("#trigger-dialog .error")).to_contain_text("pages")  # the API's answer
    conf.fill(SLOW_STREAM)
    page.click("#trigger-submit")
    _open_stream_view(page)
    produced = "#produced-fetch_pages"
    page.wait_for_function(
        "s => Number(document.querySelector(s)?.textContent.replace(/,/g, '')) > 0", arg=produced
    )
    seen = _number(page, produced)
    # Numbers go up while the run is live, without reloading the page.
    page.wait_for_function(
        "([s, n]) => Number(document.querySelector(s).textContent.replace(/,/g, '')) > n",
        arg=[produced, seen],
    )
    expect(page.locator("[data-stream=fetch_pages] .item-list li").first).to_be_visible()

    page.click("[data-stream=fetch_pages] h2 a")
    expect(page.locator("#log")).to_contain_text("handling pages", timeout=30_000)
    # The trigger's lines, written while the task waited in the triggerer, are in it too.
    expect(page.locator("#log .triggerer", has_text="fetched page").first).to_be_visible()
    expect(page.locator("#mark-success")).to_be_visible()
    page.close()


def test_iterate_shows_mapped_instances_growing_in_the_stream_view(
    app: Standalone, browser: Any
) -> None:
    page: Page = browser.new_page()
    log_in(page, app.url, "admin", app.admin_password)
    page.click("button[data-trigger=example_iterate]")
    page.click("#trigger-submit")
    _open_stream_view(page)
    instances = "[data-task=clean_page] .instances"
    page.wait_for_function(
        "s => Number(document.querySelector(s)?.textContent) >= 1", arg=instances
    )
    expect(page.locator(".badge.st-success").first).to_be_visible(timeout=60_000)
    page.click("a[href$='/tasks/clean_page']")
    expect(page.locator("#instances")).to_be_visible()
    page.close()


def test_a_viewer_sees_everything_but_cannot_trigger_or_pause(
    app: Standalone, browser: Any
) -> None:
    page: Page = browser.new_page()
    log_in(page, app.url, *VIEWER)
    expect(page.locator("#user")).to_contain_text("viewer")
    expect(page.locator("tr[data-dag=example_etl]")).to_be_visible()
    expect(page.locator("button[data-trigger]")).to_have_count(0)
    expect(page.locator("input[data-pause]")).to_have_count(0)
    # Even a hand-made request with the CSRF header is refused: the server checks the role.
    status = page.evaluate(
        """() => fetch("api/v1/dags/example_etl/runs", {
            method: "POST", body: "{}",
            headers: {"Content-Type": "application/json", "X-Tailrace-CSRF": "1"},
        }).then(r => r.status)"""
    )
    assert status == 403
    page.click("#logout")
    expect(page.locator("form.login")).to_be_visible()
    page.goto(f"{app.url}/#/dags/example_etl")
    expect(page.locator("form.login")).to_be_visible()
    page.close()


@pytest.mark.timeout(300)
def test_an_admin_replays_a_finished_streaming_run_from_its_run_page(
    app: Standalone, browser: Any, tmp_path: Any
) -> None:
    page: Page = browser.new_page()
    log_in(page, app.url, "admin", app.admin_password)
    page.click("button[data-trigger=example_streaming]")
    page.click("#trigger-submit")
    expect(page.locator("#task-table")).to_be_visible()
    expect(page.locator("h1 .badge.st-success")).to_be_visible(timeout=90_000)
    source_url = page.url
    prompts: list[str] = []

    def answer(dialog: Any) -> None:
        prompts.append(dialog.default_value)
        dialog.accept("summarise")

    page.on("dialog", answer)
    page.click("#replay-run")
    # The new run's page: a replay of the source run, linked back to it.
    expect(page.locator("#replay-of")).to_be_visible()
    assert prompts == ["summarise"], "the consumer of the stream is offered"
    assert page.url != source_url and "replay__" in page.url
    expect(page.locator("h1 .badge.st-success")).to_be_visible(timeout=90_000)
    page.screenshot(path=str(tmp_path / "replay.png"), full_page=True)
    page.close()
