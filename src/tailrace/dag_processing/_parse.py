"""The parser process: import DAG files, validate and serialize their DAGs.

Runs in a child process so user code never runs in the scheduler; it returns plain data
(JSON text and error records) and never touches the database. It announces each file
before importing it, so the parent can blame the right file when one kills or hangs it.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

from tailrace.alarm import deadline
from tailrace.dagfiles import (
    FileImportError,
    error_from_exception,
    load_dag_file,
    prepare_import_path,
)

if TYPE_CHECKING:
    from tailrace.config import Settings


@dataclass(frozen=True)
class ParseOptions:
    """How DAG files are found, imported and recorded (Airflow's names in comments)."""

    # On sys.path beside the DAGs folder while files are imported.
    plugins_folder: str | None = None
    # .tailraceignore/.airflowignore patterns: "glob" or "regexp" (dag_ignore_file_syntax).
    ignore_file_syntax: str = "glob"
    # Seconds one file's import may take before it is that file's error (dagbag_import_timeout).
    import_timeout: float = 30.0
    # New DAGs start paused unless they say otherwise (dags_are_paused_at_creation).
    paused_at_creation: bool = True

    @classmethod
    def from_settings(cls, settings: Settings) -> ParseOptions:
        return cls(
            plugins_folder=str(settings.plugins_folder),
            ignore_file_syntax=settings.dag_ignore_file_syntax,
            import_timeout=settings.dagbag_import_timeout,
            paused_at_creation=settings.dags_are_paused_at_creation,
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
        try:  # serialize_dag validates the DAG first
            result.dags[dag_id] = dumps(serialize_dag(dag))
        except Exception as exc:
            error = error_from_exception(exc, path)
            if error.dag_id is None:
                error = FileImportError(**{**error.__dict__, "dag_id": dag_id})
            result.errors.append(error)
    return result


class OutputTail(io.TextIOBase):
    """Keeps the last ``limit`` characters written: what a DAG file printed, bounded."""

    def __init__(self, limit: int = 2000) -> None:
        self.limit = limit
        self._text = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._text = (self._text + text)[-self.limit :]
        return len(text)

    def take(self) -> str:
        text, self._text = self._text, ""
        return text


def _capture_output() -> OutputTail:
    """Send what DAG files print to a bounded buffer (and the raw descriptors to
    /dev/null): a file printing in a loop must not flood the terminal of a CLI command."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    tail = OutputTail()
    sys.stdout = sys.stderr = tail
    return tail


def parser_main(conn: Connection, folder: str, paths: list[str], options: ParseOptions) -> None:
    """Entry point of a parser child: for each file send its path, then its result."""
    prepare_import_path(folder, options.plugins_folder)
    tail = _capture_output()
    for path in paths:
        conn.send(path)
        tail.take()
        result = parse_file(path, options.import_timeout)
        printed = tail.take()
        if result.errors and printed:
            first = result.errors[0]
            result.errors[0] = FileImportError(
                **{**first.__dict__, "stacktrace": f"{first.stacktrace}\nOutput:\n{printed}"}
            )
        conn.send(result)
    conn.close()
