"""Parse the dags folder in a child process and record the results in the database."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import signal
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
from sqlalchemy import Connection, Engine, delete, func, insert, select, text, update

from tailrace.dag_processing._parse import ParsedFile, ParseOptions, parser_main
from tailrace.dagfiles import FileImportError, list_dag_files
from tailrace.db import is_postgres
from tailrace.db.models import Asset, Dag, DagRun, DagVersion, ImportError_
from tailrace.errors import TailraceError
from tailrace.scheduler.schedules import next_scheduled
from tailrace.serialization import SerializedDag, loads
from tailrace.state import RunType
from tailrace.store.assets import prune_watchers, sync_dag_assets, sync_dag_references

log = logging.getLogger(__name__)


class ParserCrashedError(TailraceError, RuntimeError):
    """The parser process could not run at all (not one DAG file's fault)."""


# A file over its import timeout is first interrupted inside the parser; one that
# ignores that (blocked in C, or catching BaseException) is killed this much later.
_KILL_GRACE = 5.0
# Starting a parser process: a fresh interpreter importing Tailrace.
_START_TIMEOUT = 120.0

# A DAG file's content digest (the listing reads every DAG file anyway, and a digest
# misses no edit however quick); any other file's (mtime_ns, size).
Fingerprint = bytes | tuple[int, int]


def _digest(path: str) -> Fingerprint | None:
    try:
        return hashlib.blake2b(Path(path).read_bytes(), digest_size=16).digest()
    except OSError:
        return None


def _fingerprint(path: str) -> Fingerprint | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _died_message(path: str, exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            how = f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
    else:
        how = f"exited with code {exitcode}"
    return (
        f"the DAG parser process {how} while importing {path}; a DAG file must not end "
        "its process (os._exit, a crash in C code, running out of memory)"
    )


def _killed_message(path: str, timeout: float) -> str:
    return (
        f"importing {path} took longer than {timeout:g}s and did not stop when interrupted "
        "(it blocks in C code or catches BaseException), so its parser process was killed; "
        "move slow work out of module level and into tasks"
    )


def _file_error(path: str, message: str) -> ParsedFile:
    error = FileImportError(filename=path, message=message, stacktrace="")
    return ParsedFile(path=path, errors=[error])


def parse_files(folder: str, paths: Sequence[str], options: ParseOptions) -> list[ParsedFile]:
    """Parse ``paths`` in child processes, in order: a file that kills, hangs or floods
    its parser becomes that file's import error, and a new parser takes the rest."""
    results: dict[str, ParsedFile] = {}
    remaining = list(paths)
    while remaining:
        progressed = _parse_batch(folder, remaining, options, results)
        if not progressed:
            raise ParserCrashedError(
                f"the DAG parser process for {folder} stopped before importing any file "
                "(Tailrace or the Python environment, not a DAG file, is at fault; its "
                "error is in this process's output)"
            )
    return [results[p] for p in paths]


def _parse_batch(
    folder: str, remaining: list[str], options: ParseOptions, results: dict[str, ParsedFile]
) -> bool:
    """Run one parser over ``remaining``, taking finished files off it; whether any was."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(
        target=parser_main,
        args=(child, folder, list(remaining), options),
        name="tailrace-dag-parser",
        daemon=True,
    )
    process.start()
    child.close()
    current: str | None = None
    progressed = False
    try:
        while remaining:
            wait = options.import_timeout + _KILL_GRACE if current else _START_TIMEOUT
            if not parent.poll(wait):
                if current is None:
                    raise ParserCrashedError(f"the DAG parser for {folder} did not start in time")
                results[current] = _file_error(
                    current, _killed_message(current, options.import_timeout)
                )
                remaining.remove(current)
                return True
            message: str | ParsedFile = parent.recv()
            if isinstance(message, str):
                current = message
                continue
            results[message.path] = message
            remaining.remove(message.path)
            current, progressed = None, True
    except EOFError:
        process.join(timeout=10)
        if current is not None:
            results[current] = _file_error(current, _died_message(current, process.exitcode))
            remaining.remove(current)
            return True
        return progressed
    finally:
        parent.close()
        if process.is_alive():
            process.kill()
        process.join()
    return True


def parse_in_subprocess(
    folder: str, timeout: float = 30.0, *, options: ParseOptions | None = None
) -> list[ParsedFile]:
    """Parse every DAG file of ``folder`` away from this process (user code never runs
    in the caller)."""
    options = options or ParseOptions(import_timeout=timeout)
    errors: list[FileImportError] = []
    paths = list_dag_files(folder, ignore_file_syntax=options.ignore_file_syntax, errors=errors)
    return parse_files(folder, paths, options) + _listing_errors(errors)


def _listing_errors(errors: Sequence[FileImportError]) -> list[ParsedFile]:
    """Import errors of the ignore files themselves, one record per file."""
    by_file: dict[str, list[FileImportError]] = {}
    for error in errors:
        by_file.setdefault(error.filename, []).append(error)
    return [ParsedFile(path=path, errors=found) for path, found in by_file.items()]


class DagFileProcessor:
    """Parses a DAGs folder again and again, re-importing only what changed.

    A DAG file is re-parsed when its content changes or its last parse failed; when any other
    file that DAG files may import changes (a helper module beside the DAGs, a plugin,
    an ignore file), every DAG file is. An idle folder costs one directory walk.
    """

    def __init__(self, folder: str, options: ParseOptions | None = None) -> None:
        self.folder = folder
        self.options = options or ParseOptions()
        self._files: dict[str, tuple[Fingerprint, ParsedFile]] = {}
        self._others: frozenset[tuple[str, Fingerprint | None]] | None = None
        # The files the last parse() imported (the rest came from the previous parses).
        self.reparsed: list[str] = []

    def _other_files(self, dag_files: Collection[str]) -> frozenset[tuple[str, Fingerprint | None]]:
        found: set[tuple[str, Fingerprint | None]] = set()
        roots = [self.folder, self.options.plugins_folder]
        for root in (r for r in roots if r and os.path.isdir(r)):
            for current, dirs, names in os.walk(root, followlinks=True):
                # Not .git, .venv and the like, nor byte code: DAG files do not import them.
                dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
                for name in names:
                    path = os.path.realpath(os.path.join(current, name))
                    if path not in dag_files and not name.endswith((".pyc", ".pyo")):
                        found.add((path, _fingerprint(path)))
        return frozenset(found)

    def parse(self) -> list[ParsedFile]:
        """Every DAG file's result: the changed ones parsed now, the others remembered."""
        errors: list[FileImportError] = []
        paths = list_dag_files(
            self.folder, ignore_file_syntax=self.options.ignore_file_syntax, errors=errors
        )
        others = self._other_files(set(paths))
        if others != self._others:
            self._files.clear()
            self._others = others
        prints = {p: _digest(p) for p in paths}
        # A file that failed is tried again each time: its failure may have been passing
        # (a service down at import time), as Airflow's next parse would find.
        todo = [
            p
            for p in paths
            if p not in self._files or self._files[p][0] != prints[p] or self._files[p][1].errors
        ]
        for parsed in parse_files(self.folder, todo, self.options):
            fingerprint = prints[parsed.path]
            if fingerprint is not None:
                self._files[parsed.path] = (fingerprint, parsed)
        for gone in set(self._files) - set(paths):
            del self._files[gone]
        listing = _listing_errors(errors)
        self.reparsed = [*todo, *(p.path for p in listing)]
        return [self._files[p][1] for p in paths if p in self._files] + listing

    def parse_and_sync(self, engine: Engine, now: datetime) -> SyncReport:
        results = self.parse()
        try:
            with engine.begin() as conn:
                return sync_parsed(
                    conn,
                    self.folder,
                    results,
                    now,
                    changed=self.reparsed,
                    paused_at_creation=self.options.paused_at_creation,
                )
        except BaseException:
            # Not recorded: the next parse must write these files again.
            self._files.clear()
            raise


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
    conn: Connection,
    folder: str,
    folder_results: Sequence[ParsedFile],
    now: datetime,
    *,
    changed: Collection[str] | None = None,
    paused_at_creation: bool = True,
) -> SyncReport:
    """Upsert DAGs, add a version when a DAG changed, record and clear import errors.

    DAGs of ``folder`` not seen in this parse are marked inactive (their file vanished or
    stopped defining them); their runs and history stay. DAGs and errors of files outside
    ``folder`` are left alone: another folder's parse owns them. Only the files in
    ``changed`` (all when None) are written; the others were unchanged since the last sync.
    A new DAG starts paused when ``paused_at_creation`` unless its
    ``is_paused_upon_creation`` says otherwise.
    """
    serialize_with_other_parsers(conn)
    seen: set[str] = set()
    new_versions = 0
    rewrite = set(changed) if changed is not None else None
    folder_results = _check_assets(conn, folder_results, rewrite)
    # DAGs referring to assets a file synced after theirs defines: linked at the end.
    unresolved: list[tuple[str, SerializedDag]] = []
    for parsed in folder_results:
        if rewrite is not None and parsed.path not in rewrite:
            seen.update(parsed.dags)
            continue
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
            if _upsert_dag(
                conn,
                dag_id,
                parsed.path,
                data,
                parsed.source_hash,
                now,
                paused_at_creation,
                unresolved,
            ):
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
    for dag_id, dag in unresolved:
        sync_dag_references(conn, dag_id, dag)
    prune_watchers(conn)
    return SyncReport(dags=len(seen), new_versions=new_versions, import_errors=len(broken))


Decoded = dict[str, dict[str, SerializedDag]]  # path -> dag id -> its serialized DAG


def _check_assets(
    conn: Connection, results: Sequence[ParsedFile], rewrite: set[str] | None
) -> list[ParsedFile]:
    """Files whose DAGs name assets wrongly get an import error naming the asset, and
    those DAGs keep their last good version: an ``Asset.ref`` no DAG (nor the database)
    defines, or a name or URI that another definition gives a different partner."""
    if rewrite is not None and not rewrite:
        return list(results)  # nothing changed since the last sync: nothing to check
    decoded: Decoded = {
        parsed.path: {
            d: msgspec.convert(loads(data), SerializedDag) for d, data in parsed.dags.items()
        }
        for parsed in results
    }
    problems = _asset_problems(conn, decoded)
    out = []
    for parsed in results:
        bad = {d: m for (p, d), m in problems.items() if p == parsed.path}
        if bad and (rewrite is None or parsed.path in rewrite):
            errors = [
                FileImportError(filename=parsed.path, message=m, stacktrace="", dag_id=d)
                for d, m in bad.items()
            ]
            # In place: the processor keeps this result, and parses a file whose result
            # has errors again next time (the reference may resolve by then).
            parsed.dags = {d: data for d, data in parsed.dags.items() if d not in bad}
            parsed.errors = [*parsed.errors, *errors]
        out.append(parsed)
    return out


def _asset_problems(conn: Connection, decoded: Decoded) -> dict[tuple[str, str], str]:
    """(path, dag id) -> what is wrong with the assets that DAG names."""
    by_name: dict[str, tuple[str, str]] = {}  # name -> (uri, where)
    by_uri: dict[str, tuple[str, str]] = {}
    problems: dict[tuple[str, str], str] = {}
    for path, dags in decoded.items():
        for dag_id, dag in dags.items():
            for a in dag.assets:
                known_uri, where = by_name.setdefault(a.name, (a.uri, f"DAG '{dag_id}'"))
                known_name, where2 = by_uri.setdefault(a.uri, (a.name, f"DAG '{dag_id}'"))
                if known_uri != a.uri or known_name != a.name:
                    other = (a.name, known_uri) if known_uri != a.uri else (known_name, a.uri)
                    problems[(path, dag_id)] = (
                        f"DAG '{dag_id}' defines Asset(name={a.name!r}, uri={a.uri!r}), but "
                        f"{where if known_uri != a.uri else where2} defines "
                        f"Asset(name={other[0]!r}, uri={other[1]!r}); an asset's name and "
                        "URI each identify it"
                    )
    # Stored assets resolve references too; current definitions may move them (new URI).
    stored = conn.execute(select(Asset.name, Asset.uri)).all()
    names = set(by_name) | {name for name, _ in stored}
    uris = set(by_uri) | {uri for _, uri in stored}
    for path, dags in decoded.items():
        for dag_id, dag in dags.items():
            for ref in _refs(dag):
                found = ref.name in names if ref.name is not None else ref.uri in uris
                if not found:
                    what = f"name={ref.name!r}" if ref.name is not None else f"uri={ref.uri!r}"
                    problems.setdefault(
                        (path, dag_id),
                        f"DAG '{dag_id}' names Asset.ref({what}), an asset no DAG defines; "
                        "define it (Asset(...)) in a DAG's schedule, outlets or inlets, or "
                        "fix the reference",
                    )
    return problems


def _refs(dag: SerializedDag) -> list[Any]:
    leaves = list(dag.schedule.condition.leaves()) if dag.schedule.condition else []
    for task in dag.tasks:
        leaves.extend(task.inlets)
    return [leaf for leaf in leaves if leaf.kind == "ref"]


def _upsert_dag(
    conn: Connection,
    dag_id: str,
    path: str,
    data: str,
    source_hash: str,
    now: datetime,
    paused_at_creation: bool,
    unresolved: list[tuple[str, SerializedDag]],
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
        "stream_retention": dag.stream_retention,
        "last_parsed_at": now,
    }
    if current is None:
        paused = (
            dag.is_paused_upon_creation
            if dag.is_paused_upon_creation is not None
            else paused_at_creation
        )
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
    if sync_dag_assets(conn, dag_id, dag, now):
        unresolved.append((dag_id, dag))
    log.info("DAG %s: version %d from %s", dag_id, number, path)
    return True


def parse_and_sync(
    engine: Engine, folder: str, now: datetime, options: ParseOptions | None = None
) -> SyncReport:
    """Parse every DAG file of ``folder`` once and record the results."""
    return DagFileProcessor(folder, options).parse_and_sync(engine, now)
