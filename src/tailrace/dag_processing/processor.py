"""Parse the dags folder in a child process and record the results in the database."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec
from sqlalchemy import Connection, Engine, delete, func, insert, select, text, update

from tailrace.dag_processing._parse import ParsedFile, parser_main
from tailrace.dagfiles import FileImportError
from tailrace.db import is_postgres
from tailrace.db.models import Dag, DagRun, DagVersion, ImportError_
from tailrace.scheduler.schedules import next_scheduled
from tailrace.serialization import SerializedDag, loads
from tailrace.state import RunType

log = logging.getLogger(__name__)


class ParserCrashedError(RuntimeError):
    pass


def parse_in_subprocess(folder: str, timeout: float = 30.0) -> list[ParsedFile]:
    """Parse ``folder`` in a fresh interpreter; user code never runs in the caller."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(
        target=parser_main, args=(child, folder, timeout), name="tailrace-dag-parser", daemon=True
    )
    process.start()
    child.close()
    try:
        if not parent.poll(timeout * 10 + 30):
            process.kill()
            raise ParserCrashedError(f"parsing {folder} did not finish in time")
        results: list[ParsedFile] = parent.recv()
    except EOFError:
        process.join()
        raise ParserCrashedError(
            f"the DAG parser process died (exit code {process.exitcode}) while parsing {folder}"
        ) from None
    finally:
        parent.close()
    process.join()
    return results


@dataclass(frozen=True)
class SyncReport:
    dags: int
    new_versions: int
    import_errors: int


def _format_error(e: FileImportError) -> str:
    # Said once: SyntaxError's text has its line, and our errors name their DAG and task.
    where = [
        f"DAG {e.dag_id!r}" if e.dag_id and f"DAG {e.dag_id!r}" not in e.message else "",
        f"task {e.task_id!r}" if e.task_id and repr(e.task_id) not in e.message else "",
        f"line {e.line}" if e.line and f"line {e.line}" not in e.message else "",
    ]
    located = ", ".join(w for w in where if w)
    return f"{e.message} ({located})" if located else e.message


def _within(path: str, folder: str) -> bool:
    return Path(path).is_relative_to(Path(folder).resolve())


# Any number that no other advisory lock of Tailrace uses.
_SYNC_LOCK = 0x7461_696C_7261_6365  # "tailrace"


def serialize_with_other_parsers(conn: Connection) -> None:
    """Several schedulers parse the same folder: let their syncs take turns (PostgreSQL;
    SQLite's single writer already does), so two never insert the same DAG version."""
    if is_postgres(conn):
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SYNC_LOCK})


def sync_parsed(
    conn: Connection, folder: str, folder_results: Sequence[ParsedFile], now: datetime
) -> SyncReport:
    """Upsert DAGs, add a version when a DAG changed, record and clear import errors.

    DAGs of ``folder`` not seen in this parse are marked inactive (their file vanished or
    stopped defining them); their runs and history stay. DAGs and errors of files outside
    ``folder`` are left alone: another folder's parse owns them.
    """
    serialize_with_other_parsers(conn)
    seen: set[str] = set()
    new_versions = 0
    for parsed in folder_results:
        conn.execute(delete(ImportError_).where(ImportError_.filename == parsed.path))
        if parsed.errors:
            first = parsed.errors[0]
            conn.execute(
                insert(ImportError_).values(
                    filename=parsed.path,
                    dag_id=first.dag_id,
                    task_id=first.task_id,
                    line=first.line,
                    message="\n".join(_format_error(e) for e in parsed.errors),
                    stacktrace="\n\n".join(e.stacktrace for e in parsed.errors if e.stacktrace),
                    timestamp=now,
                )
            )
        for dag_id, data in parsed.dags.items():
            seen.add(dag_id)
            if _upsert_dag(conn, dag_id, parsed.path, data, parsed.source_hash, now):
                new_versions += 1
    # Files with import errors keep their DAGs active with the last good version.
    broken = {p.path for p in folder_results if p.errors}
    stale = select(Dag.dag_id).where(Dag.is_active.is_(True), Dag.dag_id.not_in(seen or {""}))
    for dag_id, fileloc in conn.execute(stale.add_columns(Dag.fileloc)).all():
        if fileloc not in broken and _within(fileloc, folder):
            conn.execute(update(Dag).where(Dag.dag_id == dag_id).values(is_active=False))
    parsed_files = {p.path for p in folder_results}
    for (filename,) in conn.execute(select(ImportError_.filename)).all():
        if filename not in parsed_files and _within(filename, folder):
            conn.execute(delete(ImportError_).where(ImportError_.filename == filename))
    return SyncReport(dags=len(seen), new_versions=new_versions, import_errors=len(broken))


def _upsert_dag(
    conn: Connection, dag_id: str, path: str, data: str, source_hash: str, now: datetime
) -> bool:
    digest = hashlib.sha256(f"{source_hash}:{data}".encode()).hexdigest()
    dag = msgspec.convert(loads(data), SerializedDag)
    current = conn.execute(
        select(Dag.latest_version_id, DagVersion.hash, DagVersion.version_number, Dag.is_paused)
        .outerjoin(DagVersion, DagVersion.id == Dag.latest_version_id)
        .where(Dag.dag_id == dag_id)
    ).first()
    values = {
        "fileloc": path,
        "is_active": True,
        "schedule_description": dag.schedule.description,
        "description": dag.description,
        "tags": dag.tags,
        "max_active_runs": dag.max_active_runs,
        "last_parsed_at": now,
    }
    if current is None:
        paused = dag.is_paused_upon_creation if dag.is_paused_upon_creation is not None else False
        conn.execute(insert(Dag).values(dag_id=dag_id, is_paused=paused, **values))
    else:
        conn.execute(update(Dag).where(Dag.dag_id == dag_id).values(**values))
        if current.hash == digest:
            return False
    number = (current.version_number or 0) + 1 if current is not None else 1
    version_id = conn.execute(
        insert(DagVersion)
        .values(
            dag_id=dag_id,
            version_number=number,
            hash=digest,
            data=data,
            fileloc=path,
            created_at=now,
        )
        .returning(DagVersion.id)
    ).scalar_one()
    last = conn.scalar(
        select(func.max(DagRun.logical_date)).where(
            DagRun.dag_id == dag_id, DagRun.run_type == RunType.SCHEDULED
        )
    )
    next_dagrun = next_scheduled(dag, last, now)
    conn.execute(
        update(Dag)
        .where(Dag.dag_id == dag_id)
        .values(latest_version_id=version_id, next_dagrun=next_dagrun)
    )
    log.info("DAG %s: version %d from %s", dag_id, number, path)
    return True


def parse_and_sync(engine: Engine, folder: str, now: datetime, timeout: float = 30.0) -> SyncReport:
    results = parse_in_subprocess(folder, timeout)
    with engine.begin() as conn:
        return sync_parsed(conn, folder, results, now)
