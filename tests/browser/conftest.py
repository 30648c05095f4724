"""One `tailrace standalone` (real processes, the bundled examples) and one headless Chromium
per module. Chromium is Debian's package, never a Playwright download: without it these
tests are skipped locally and fail under CI=true."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tailrace.testing._browser import (
    Standalone,
    api_client,
    chromium,
    chromium_path,
    log_in,
    standalone,
)

VIEWER = ("vic", "vic-secret-pw")

# A page's assertions wait up to this long for it to show what they expect (Playwright's
# default is 5 s; the API docs' first render parses a large bundle and the whole OpenAPI
# document, which takes longer on a loaded 2-core machine). Waiting ends as soon as it shows.
expect.set_options(timeout=30_000)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.fixture(scope="module")
def chromium_executable() -> str:
    path = chromium_path()
    if path is None:
        reason = "Chromium is not installed (apt-get install chromium)"
        if _in_ci():
            pytest.fail(f"Chromium is required in CI (CI=true): {reason}")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def app(
    tmp_path_factory: pytest.TempPathFactory, chromium_executable: str, module_has_machine: None
) -> Iterator[Standalone]:
    # A standalone and a browser load the machine: timing-sensitive tests wait meanwhile.
    home: Path = tmp_path_factory.mktemp("standalone_home")
    with standalone(home) as running:
        created = running.cli(
            "users", "create", VIEWER[0], "--role", "viewer", "--password", VIEWER[1]
        )
        assert created.returncode == 0, created.stderr
        yield running


@pytest.fixture(scope="module")
def browser(chromium_executable: str, module_has_machine: None) -> Iterator[object]:
    with chromium() as context:
        context.set_default_timeout(30_000)
        yield context


@contextlib.contextmanager
def standalone_over(
    tmp_path_factory: pytest.TempPathFactory,
    files: Mapping[str, str],
    env: Mapping[str, str] | None = None,
) -> Iterator[Standalone]:
    """A standalone over a DAGs folder of its own holding ``files`` (name → source), for
    a module's ``app`` fixture (which replaces the bundled examples' one above)."""
    home = tmp_path_factory.mktemp("standalone_home")
    dags = home / "dags"
    dags.mkdir()
    for name, source in files.items():
        (dags / name).write_text(source)
    with standalone(home, env={"TAILRACE_DAGS_FOLDER": str(dags), **(env or {})}) as running:
        yield running


@pytest.fixture(scope="module")
def client(app: Standalone) -> Iterator[httpx.Client]:
    with api_client(app) as c:
        yield c


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where each test saves its page (``TAILRACE_TEST_SCREENSHOTS``, else a temporary
    folder): open them after a change to the UI."""
    named = os.environ.get("TAILRACE_TEST_SCREENSHOTS")
    if named:
        Path(named).mkdir(parents=True, exist_ok=True)
        return Path(named)
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def page(app: Standalone, browser: Any) -> Iterator[Page]:
    """A tab logged in as the admin."""
    tab: Page = browser.new_page()
    log_in(tab, app.url, "admin", app.admin_password)
    yield tab
    tab.close()
