"""When a command must parse the DAG folders itself, and the errors it then explains.

A running scheduler (or `standalone`) parses its folders and records, per DAG, the file
and when it was parsed (``dag.last_parsed_at``), and per broken file its import error.
The database then reflects a folder when every DAG file in it is no newer than its last
parse, no file a DAG came from is gone, and (for one DAG) that DAG is there. Only when
it does not does a command parse, in a child process, as the scheduler would; a command
that reads the database alone stays fast. A file with no DAGs has no record of its
own: the folder's latest parse stands for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    from tailrace.config import Settings


def stale_reason(
    conn: Connection, folder: Path, dag_id: str | None = None, ignore_file_syntax: str = "glob"
) -> str | None:
    """Why the database does not reflect ``folder`` (and ``dag_id``), or None."""
    from sqlalchemy import select

    from tailrace.dagfiles import list_dag_files
    from tailrace.db.models import Dag, ImportError_

    root = folder.resolve()
    parsed: dict[str, datetime] = {}
    active: set[str] = set()
    known_dag = False
    for row in conn.execute(select(Dag.dag_id, Dag.fileloc, Dag.is_active, Dag.last_parsed_at)):
        if row.dag_id == dag_id and row.is_active:
            known_dag = True
        if not Path(row.fileloc).is_relative_to(root) or row.last_parsed_at is None:
            continue
        parsed[row.fileloc] = max(row.last_parsed_at, parsed.get(row.fileloc, row.last_parsed_at))
        if row.is_active:
            active.add(row.fileloc)
    for filename, timestamp in conn.execute(select(ImportError_.filename, ImportError_.timestamp)):
        if Path(filename).is_relative_to(root):
            parsed[filename] = max(timestamp, parsed.get(filename, timestamp))
    if not parsed:
        return f"{folder} has not been parsed yet"
    folder_parsed = max(parsed.values())
    files = list_dag_files(str(root), ignore_file_syntax=ignore_file_syntax)
    for path in files:
        changed = datetime.fromtimestamp(Path(path).stat().st_mtime, UTC)
        if changed > parsed.get(path, folder_parsed):
            return f"{path} changed since it was last parsed"
    if gone := sorted(active - set(files)):
        return f"{gone[0]} is gone"
    if dag_id is not None and not known_dag:
        return f"DAG {dag_id!r} is not in the database"
    return None


def ensure_parsed(
    engine: Engine, folders: Sequence[Path], dag_id: str | None, settings: Settings
) -> bool:
    """Parse each folder the database does not reflect; True if any was parsed. (The
    parser is imported only then: a command that finds the database current stays quick.)"""
    import logging

    from tailrace.db import read_only_engine

    log = logging.getLogger(__name__)
    parsed = False
    for folder in folders:
        with read_only_engine(engine).connect() as conn:
            reason = stale_reason(conn, folder, dag_id, settings.dag_ignore_file_syntax)
        if reason is None:
            log.debug("not parsing %s: the database reflects it", folder)
            continue
        log.debug("parsing %s: %s", folder, reason)
        from tailrace.cli._common import console
        from tailrace.clock import utcnow
        from tailrace.dag_processing import ParseOptions, parse_and_sync

        with console.status(f"Parsing {folder} …"):
            parse_and_sync(engine, str(folder), utcnow(), ParseOptions.from_settings(settings))
        parsed = True
    return parsed


def import_error_for(
    conn: Connection, dag_id: str, *, mentioned: bool = True
) -> dict[str, object] | None:
    """The recorded import error (filename, line, message) of the file that defines (or
    defined) ``dag_id``: the DAG's own file, an error naming the DAG, or else (when
    ``mentioned``) a broken file that mentions its id."""
    from sqlalchemy import select

    from tailrace.db.models import Dag, ImportError_

    errors = {row.filename: row for row in conn.execute(select(ImportError_))}
    if not errors:
        return None
    fileloc = conn.scalar(select(Dag.fileloc).where(Dag.dag_id == dag_id))
    candidates = [e for e in errors.values() if e.filename == fileloc or e.dag_id == dag_id]
    if not candidates and mentioned:
        word = re.compile(rb"\b" + re.escape(dag_id.encode()) + rb"\b")
        for filename, error in sorted(errors.items()):
            try:
                if word.search(Path(filename).read_bytes()):
                    candidates.append(error)
            except OSError:
                continue
    if not candidates:
        return None
    e = candidates[0]
    # The record's message may end with the line, which is said up front instead.
    message = e.message.removesuffix(f" (line {e.line})")
    return {"filename": e.filename, "line": e.line, "message": message}
