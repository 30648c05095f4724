"""The parser process: import DAG files, validate and serialize their DAGs.

Runs in a child process so user code never runs in the scheduler; it returns plain data
(JSON text and error records) and never touches the database.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from tailrace.alarm import deadline
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


def parse_file(path: str, timeout: float = 30.0) -> ParsedFile:
    from tailrace.serialization import dumps
    from tailrace.serialization._serialize import serialize_dag

    result = ParsedFile(path=path, source_hash=hashlib.sha256(Path(path).read_bytes()).hexdigest())
    with deadline(
        timeout,
        lambda: DagFileTimeout(
            f"importing {path} took longer than {timeout:g}s; move slow work (network "
            "calls, heavy computation) out of module level and into tasks"
        ),
    ):
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
