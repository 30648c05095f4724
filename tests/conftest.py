"""Fixtures shared by the whole suite.

Database fixtures run each test on SQLite and on PostgreSQL (``[sqlite]``/``[postgres]``
ids). To run a test on one backend only, parametrize ``db_backend`` directly::

    @pytest.mark.parametrize("db_backend", ["sqlite"])
    def test_wal(engine): ...

PostgreSQL tests are skipped when the server is unreachable, but fail under ``CI=true``.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import textwrap
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from tailrace.dag_processing import ParseOptions
from tailrace.db import create_engine
from tailrace.testing import (
    DagHarness,
    copy_sqlite_database,
    migrate_database,
    postgres_server_url,
    postgres_unavailable_reason,
    temporary_postgres_database,
    temporary_sqlite_url,
)
from tailrace.testing.pytest_plugin import time_skipping  # noqa: F401 - a fixture for all tests

DB_BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.fixture(autouse=True)
def tailrace_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TAILRACE_HOME per test; settings from the developer's shell do not leak in."""
    for name in list(os.environ):
        if name.startswith("TAILRACE_") and not name.startswith("TAILRACE_TEST_"):
            monkeypatch.delenv(name)
    home = tmp_path / "tailrace_home"
    home.mkdir()
    monkeypatch.setenv("TAILRACE_HOME", str(home))
    return home


# A test that waits for the machine (below) waits at most for the test or browser module
# holding it (the two-minute soak is the longest); pytest-timeout counts from the test's
# setup, so that wait comes on top of the test's own timeout.
MACHINE_WAIT_SECONDS = 300


def _holds_machine(item: pytest.Item) -> bool:
    return item.get_closest_marker("exclusive") is not None or "module_has_machine" in (
        getattr(item, "fixturenames", ())
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    default = float(config.getini("timeout") or 0)
    for item in items:
        own = item.get_closest_marker("timeout")
        base = float(own.args[0]) if own is not None and own.args else default
        if _holds_machine(item) and base:
            item.add_marker(pytest.mark.timeout(base + MACHINE_WAIT_SECONDS), append=False)
    _place_long_exclusive_tests(items)


def _place_long_exclusive_tests(items: list[pytest.Item]) -> None:
    """Move the slow exclusive tests (the soak: two minutes) to the start of the longest
    stretch of tests that hold no machine lock: the other xdist worker runs that stretch
    meanwhile instead of waiting at the next exclusive test for the lock."""
    long = [i for i in items if i.get_closest_marker("slow") and i.get_closest_marker("exclusive")]
    if not long:
        return
    moved = {id(i) for i in long}
    rest = [i for i in items if id(i) not in moved]
    holders = [n for n, item in enumerate(rest) if _holds_machine(item)]
    bounds = [-1, *holders, len(rest)]
    start = max(itertools.pairwise(bounds), key=lambda pair: pair[1] - pair[0])[0] + 1
    items[:] = rest[:start] + long + rest[start:]


@contextmanager
def machine_to_itself(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hold the lock every xdist worker shares for tests that must not overlap: ones that
    load the machine (a browser and a whole standalone) and ones whose timing a loaded
    machine breaks (a trigger that must still be pending after a CLI call)."""
    root = tmp_path_factory.getbasetemp()
    shared = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    with (shared / "machine.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def module_has_machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """For a module that loads the machine (the browser tests): exclusive tests wait."""
    with machine_to_itself(tmp_path_factory):
        yield


@pytest.fixture(autouse=True)
def _exclusive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests marked ``exclusive`` run while no other such test (or browser module) does."""
    if request.node.get_closest_marker("exclusive") is None:
        yield
        return
    with machine_to_itself(request.getfixturevalue("tmp_path_factory")):
        yield


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The URL of the test PostgreSQL server's maintenance database."""
    url = postgres_server_url()
    reason = postgres_unavailable_reason(url)
    if reason is not None:
        if _in_ci():
            pytest.fail(f"PostgreSQL is required in CI (CI=true) but unavailable: {reason}")
        pytest.skip(f"PostgreSQL unavailable: {reason}")
    return url


@pytest.fixture(scope="session")
def postgres_template(postgres_server: str) -> Iterator[str]:
    """Name of a database migrated once per session (and per xdist worker), copied per test."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with temporary_postgres_database(
        postgres_server, prefix=f"tailrace_tpl_{worker}", migrate=True
    ) as url:
        yield url.rsplit("/", 1)[1]


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite database file, copied per test."""
    url = temporary_sqlite_url(tmp_path_factory.mktemp("sqlite_template"))
    migrate_database(url)
    return Path(url.removeprefix("sqlite:///"))


@pytest.fixture(params=DB_BACKENDS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(db_backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database migrated to head, dropped after the test."""
    if db_backend == "sqlite":
        template = request.getfixturevalue("sqlite_template")
        yield copy_sqlite_database(template, tmp_path / "db")
        return
    server = request.getfixturevalue("postgres_server")
    template = request.getfixturevalue("postgres_template")
    with temporary_postgres_database(server, template=template) as url:
        yield url


@pytest.fixture
def empty_database_url(
    db_backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[str]:
    """A fresh database with no tables at all, dropped after the test."""
    if db_backend == "sqlite":
        yield temporary_sqlite_url(tmp_path / f"empty-{uuid.uuid4().hex}")
        return
    server = request.getfixturevalue("postgres_server")
    with temporary_postgres_database(server) as url:
        yield url


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on a migrated database, disposed after the test."""
    engine = create_engine(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


WriteDag = Callable[[str, str], Path]


@pytest.fixture
def dags_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    return folder


@pytest.fixture
def write_dag(dags_folder: Path) -> WriteDag:
    """Write a DAG file (dedented) into the test's dags folder."""

    def write(name: str, source: str) -> Path:
        path = dags_folder / name
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.fixture
def harness(engine: Engine, dags_folder: Path, tmp_path: Path) -> Iterator[DagHarness]:
    """A scheduler, workers and a triggerer over the test's dags folder and database."""
    # Tests schedule their DAGs without unpausing them first.
    options = ParseOptions(paused_at_creation=False)
    with DagHarness(engine, dags_folder, log_folder=tmp_path / "logs", parse_options=options) as h:
        yield h
