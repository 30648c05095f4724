"""DAG discovery: files are imported in child processes; the results go to the database."""

from tailrace.dag_processing._parse import ParsedFile, ParseOptions
from tailrace.dag_processing.processor import (
    DagFileProcessor,
    ParserCrashedError,
    SyncReport,
    parse_and_sync,
    parse_files,
    parse_in_subprocess,
    sync_parsed,
)

__all__ = [
    "DagFileProcessor",
    "ParseOptions",
    "ParsedFile",
    "ParserCrashedError",
    "SyncReport",
    "parse_and_sync",
    "parse_files",
    "parse_in_subprocess",
    "sync_parsed",
]
