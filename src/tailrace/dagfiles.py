"""Import DAG files. Runs only where user code may run: the parser process and workers."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailrace.sdk import DAG


@dataclass(frozen=True)
class FileImportError:
    """Why a DAG file (or one DAG in it) could not be loaded, pointing at the user's line."""

    filename: str
    message: str
    stacktrace: str
    line: int | None = None
    dag_id: str | None = None
    task_id: str | None = None


@dataclass
class LoadedFile:
    path: str
    dags: dict[str, DAG] = field(default_factory=dict)
    errors: list[FileImportError] = field(default_factory=list)


# DAG files are imported under a name derived from their path, so two files named alike
# never collide; a trigger class defined in a DAG file has this prefix in its classpath.
DAG_MODULE_PREFIX = "tailrace_dag_"


def module_name(path: str) -> str:
    digest = hashlib.sha1(path.encode()).hexdigest()[:12]
    return f"{DAG_MODULE_PREFIX}{Path(path).stem}_{digest}"


def _user_line(exc: BaseException, path: str) -> int | None:
    """The deepest traceback line that lies in the DAG file itself."""
    if isinstance(exc, SyntaxError) and exc.filename and os.path.abspath(exc.filename) == path:
        return exc.lineno
    # An error found after the import (a cycle) may say where in the file it was made.
    location = getattr(exc, "location", None)
    if isinstance(location, tuple) and os.path.abspath(location[0]) == path:
        return int(location[1])
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if os.path.abspath(frame.f_code.co_filename) == path:
            line = lineno
    return line


def error_from_exception(exc: BaseException, path: str) -> FileImportError:
    return FileImportError(
        filename=path,
        message=f"{type(exc).__name__}: {exc}",
        stacktrace="".join(traceback.format_exception(exc)),
        line=_user_line(exc, path),
        dag_id=getattr(exc, "dag_id", None),
        task_id=getattr(exc, "task_id", None),
    )


def load_dag_file(path: str) -> LoadedFile:
    """Import one file and collect the DAGs it defines; never raises for user errors."""
    from tailrace.sdk._dag import pop_registered_dags

    result = LoadedFile(path=path)
    name = module_name(path)
    pop_registered_dags()
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}: not a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except BaseException as exc:  # user code may raise anything, even SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        sys.modules.pop(name, None)
        pop_registered_dags()
        result.errors.append(error_from_exception(exc, path))
        return result
    for dag in pop_registered_dags():
        if dag.dag_id in result.dags and result.dags[dag.dag_id] is not dag:
            result.errors.append(
                FileImportError(
                    filename=path,
                    message=f"DAG {dag.dag_id!r} is defined twice in {path}; "
                    "give each DAG its own dag_id",
                    stacktrace="",
                    dag_id=dag.dag_id,
                )
            )
            continue
        result.dags[dag.dag_id] = dag
    return result


def list_dag_files(folder: str) -> list[str]:
    """Python files under ``folder`` that may hold DAGs, in a stable order.

    Like Airflow's safe mode, a file is only imported if it mentions "dag" somewhere;
    names starting with "_" or "." are skipped.
    """
    root = Path(folder)
    if root.is_file():
        return [str(root.resolve())]
    files = []
    for p in sorted(root.rglob("*.py")):
        if any(part.startswith((".", "_")) for part in p.relative_to(root).parts):
            continue
        try:
            text = p.read_bytes()
        except OSError:
            continue
        if b"dag" in text.lower():
            files.append(str(p.resolve()))
    return files


class DagFileCache:
    """Workers import each DAG file once per version (path, mtime, size).

    Thread-safe: the triggerer loads files from several threads, and an import registers
    DAGs and a module globally, so one file is imported at a time.
    """

    def __init__(self) -> None:
        self._files: dict[str, tuple[tuple[int, int], LoadedFile]] = {}
        self._lock = threading.Lock()

    def get(self, path: str) -> LoadedFile:
        st = os.stat(path)
        version = (st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._files.get(path)
            if cached is not None and cached[0] == version:
                return cached[1]
            loaded = load_dag_file(path)
            self._files[path] = (version, loaded)
            return loaded
