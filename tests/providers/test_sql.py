"""The SQL provider on real SQLite, PostgreSQL and (when reachable) MySQL/MariaDB."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tailrace.execution._worker import StreamReader
from tailrace.providers.sql import RowError, SqlHook, sqlalchemy_url
from tailrace.serialization import dumps
from tailrace.testing import temporary_postgres_database

MYSQL_SERVER = "mysql://root@127.0.0.1:3306"

TARGETS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql"),
]


@pytest.fixture
def mysql_url() -> Iterator[str]:
    pytest.importorskip("pymysql")
    admin = create_engine(sqlalchemy_url(MYSQL_SERVER))
    name = f"tailrace_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
    except Exception as exc:  # no server here: MySQL is optional, unlike PostgreSQL
        admin.dispose()
        pytest.skip(f"MySQL unavailable at {MYSQL_SERVER}: {type(exc).__name__}")
    try:
        yield f"{MYSQL_SERVER}/{name}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP DATABASE {name}"))
        admin.dispose()


@pytest.fixture(params=TARGETS)
def target_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database for the provider to write to (not Tailrace's metadata database)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'warehouse.db'}"
    elif request.param == "postgres":
        server = request.getfixturevalue("postgres_server")
        with temporary_postgres_database(server, prefix="tailrace_warehouse") as url:
            yield url
    else:
        yield request.getfixturevalue("mysql_url")


@pytest.fixture
def hook(target_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[SqlHook]:
    monkeypatch.setenv("TAILRACE_CONN_WAREHOUSE", target_url)
    hook = SqlHook("warehouse")
    hook.run(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer VARCHAR(40) NOT NULL, "
        "amount NUMERIC(10, 2) NOT NULL)"
    )
    try:
        yield hook
    finally:
        hook.dispose()


def rows(n: int, start: int = 1, amount: float = 1.5) -> list[dict[str, Any]]:
    return [{"id": i, "customer": f"c{i}", "amount": amount} for i in range(start, start + n)]


def stored(hook: SqlHook) -> list[dict[str, Any]]:
    return hook.get_records("SELECT id, customer, amount FROM orders ORDER BY id")


def test_rows_are_upserted_in_batches_and_a_retry_adds_no_duplicates(hook: SqlHook) -> None:
    assert hook.insert_rows("orders", rows(10), key="id", chunk_size=3) == 10
    # The same batch again (a retried task), with changed values: updated, not duplicated.
    assert hook.insert_rows("orders", rows(10, amount=2.25), key="id", chunk_size=4) == 10
    got = stored(hook)
    assert [r["id"] for r in got] == list(range(1, 11))
    assert {r["amount"] for r in got} == {2.25}


def test_a_refused_row_fails_its_batch_with_its_key_and_earlier_batches_stay_once(
    hook: SqlHook,
) -> None:
    batch = rows(10)
    batch[6]["customer"] = None  # row 7 violates NOT NULL
    with pytest.raises(RowError) as caught:
        hook.insert_rows("orders", batch, key="id", chunk_size=3)
    error = caught.value
    assert error.key == {"id": 7}
    assert (error.batch, error.position) == (3, 7)
    assert "customer" in str(error).lower() and "null" in str(error).lower()
    # Batches 1 and 2 (rows 1-6) are committed; batch 3 (rows 7-9) was rolled back.
    assert [r["id"] for r in stored(hook)] == [1, 2, 3, 4, 5, 6]
    # The retry, row fixed: every row exactly once.
    batch[6]["customer"] = "c7"
    assert hook.insert_rows("orders", batch, key="id", chunk_size=3) == 10
    assert [r["id"] for r in stored(hook)] == list(range(1, 11))


def test_rows_that_do_not_fit_the_table_are_named_before_anything_is_sent(hook: SqlHook) -> None:
    with pytest.raises(
        RowError,
        match=r"row 2 of batch 1 \(key \{'id': 2\}\).*no column\(s\) "
        r"\['colour'\]",
    ):
        hook.insert_rows("orders", [*rows(1), {**rows(1, 2)[0], "colour": "red"}], key="id")
    with pytest.raises(RowError, match="lacks the key"):
        hook.insert_rows("orders", [{"customer": "x", "amount": 1}], key="id")
    assert stored(hook) == []


def test_a_lazy_stream_of_pages_is_read_a_page_at_a_time(hook: SqlHook) -> None:
    # An upstream output stream: each item a page (a list of rows), as a
    # PaginatedHttpOperator produces; the reader fetches 1,000 items per request.
    pages = [rows(5, start=1 + 5 * p) for p in range(2500 // 5)]
    fetches: list[tuple[int, int]] = []

    def fetch(stream_id: int, start: int, limit: int) -> list[str]:
        fetches.append((start, limit))
        return [dumps(page) for page in pages[start : start + limit]]

    reader = StreamReader(1, len(pages), fetch)
    assert hook.insert_rows("orders", reader, key="id", chunk_size=1000) == 2500
    assert fetches == [(0, 1000)]  # 500 pages: one request
    assert hook.get_first("SELECT COUNT(*) FROM orders") == 2500


def test_a_single_row_or_a_single_page_is_accepted(hook: SqlHook) -> None:
    assert hook.insert_rows("orders", rows(1)[0], key="id") == 1
    assert hook.insert_rows("orders", [rows(2, start=2)], key="id") == 2
    assert [r["id"] for r in stored(hook)] == [1, 2, 3]


def test_queries_return_json_safe_dicts(hook: SqlHook) -> None:
    hook.insert_rows("orders", rows(2, amount=3.5), key="id")
    results = hook.run(
        ["UPDATE orders SET amount = 4 WHERE id = :id", "SELECT * FROM orders ORDER BY id"],
        {"id": 2},
    )
    assert results == [
        None,
        [
            {"id": 1, "customer": "c1", "amount": 3.5},
            {"id": 2, "customer": "c2", "amount": 4},
        ],
    ]


def test_sqlalchemy_urls_get_our_drivers() -> None:
    assert sqlalchemy_url("postgres://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    assert sqlalchemy_url("mysql://root@h/db") == "mysql+pymysql://root@h/db"
    assert sqlalchemy_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
