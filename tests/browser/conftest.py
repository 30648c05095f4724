"""One `tailrace standalone` (real processes, the bundled examples) and one headless Chromium
per module. Chromium is Debian's package, never a Playwright download: without it these
tests are skipped locally and fail under CI=true."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailrace.testing._browser import Standalone, chromium, chromium_path, standalone

VIEWER = ("vic", "vic-secret-pw")


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
