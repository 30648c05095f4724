"""DAG discovery: files are imported in a child process; the results go to the database."""

from tailrace.dag_processing.processor import (
    SyncReport,
    parse_and_sync,
    parse_in_subprocess,
    sync_parsed,
)

__all__ = ["SyncReport", "parse_and_sync", "parse_in_subprocess", "sync_parsed"]
