"""The parser process: import DAG files, validate and serialize their DAGs.

Runs in a child process so user code never runs in the scheduler; it returns plain data
(JSON text and error records) and never touches the database.
"""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from tailrace.dagfiles import (
    FileImportError,
    error_from_exception,
    list_dag_files,
    load_dag_file,
)


@dataclass
class ParsedFile:
    path: str
    # dag_id -> SerializedDag as JSON text
    dags: dict[str, str] = field(default_factory=dict)
    # sha256 of the file's bytes: task code lives there, so an edit is a new DAG version.
    source_hash: str = ""
    errors: list[FileImportError] = field(default_factory=list)


class DagFileTimeout(BaseException):
    """Raised into a DAG file's import when it runs too long (recorded as its import error)."""


@contextmanager
def _time_limit(path: str, seconds: float) -> Iterator[None]:
    def on_alarm(signum: int, frame: object) -> None:
        raise DagFileTimeout(
            f"importing {path} took longer than {seconds:g}s; move slow work (network "
            "calls, heavy computation) out of module level and into tasks"
        )

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def parse_file(path: str, timeout: float = 30.0) -> ParsedFile:
    from tailrace.serialization import dumps
    from tailrace.serialization._serialize import serialize_dag

    result = ParsedFile(path=path, source_hash=hashlib.sha256(Path(path).read_bytes()).hexdigest())
    with _time_limit(path, timeout):
        loaded = load_dag_file(path)
    result.errors.extend(loaded.errors)
    for dag_id, dag in loaded.dags.items():
        try:
            dag.validate()
            result.dags[dag_id] = dumps(serialize_dag(dag))
        except Exception as exc:
            error = error_from_exception(exc, path)
            if error.dag_id is None:
                error = FileImportError(**{**error.__dict__, "dag_id": dag_id})
            result.errors.append(error)
    return result


def parse_folder(folder: str, timeout: float = 30.0) -> list[ParsedFile]:
    return [parse_file(path, timeout) for path in list_dag_files(folder)]


def parser_main(conn: Connection, folder: str, timeout: float) -> None:
    """Entry point of the parser child process: parse once, send results, exit."""
    conn.send(parse_folder(folder, timeout))
    conn.close()
