"""Seams for testing Tailrace and DAGs built on it."""

from tailrace.testing._clock import FakeClock
from tailrace.testing._db import (
    copy_sqlite_database,
    migrate_database,
    postgres_server_url,
    postgres_unavailable_reason,
    temporary_postgres_database,
    temporary_sqlite_url,
)

__all__ = [
    # time
    "FakeClock",
    # databases
    "copy_sqlite_database",
    "migrate_database",
    "postgres_server_url",
    "postgres_unavailable_reason",
    "temporary_postgres_database",
    "temporary_sqlite_url",
]
