"""Import DAG files. Runs only where user code may run: the parser process and workers."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import re
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tailrace.tracebacks import user_traceback

if TYPE_CHECKING:
    import pathspec

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
        stacktrace=user_traceback(exc),
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


# Read in every folder of the DAGs folder; Airflow's name is read as well.
IGNORE_FILE_NAMES = (".tailraceignore", ".airflowignore")
IGNORE_SYNTAXES = ("glob", "regexp")


@dataclass(frozen=True)
class _IgnoreRules:
    """The patterns of one folder's ignore files, matched against paths relative to it."""

    base: Path
    syntax: str
    patterns: tuple[str, ...]

    def matches(self, path: Path, is_dir: bool) -> bool:
        relative = path.relative_to(self.base).as_posix()
        if self.syntax == "regexp":
            return any(re.search(p, relative) for p in self.patterns)
        return self._spec().match_file(relative + "/" if is_dir else relative)

    @functools.cache  # noqa: B019 - a handful of folders, alive as long as the listing
    def _spec(self) -> pathspec.GitIgnoreSpec:
        import pathspec  # only for folders with glob ignore files

        return pathspec.GitIgnoreSpec.from_lines(self.patterns)


def _read_ignore_rules(
    folder: Path, syntax: str, errors: list[FileImportError]
) -> _IgnoreRules | None:
    lines: list[str] = []
    for name in IGNORE_FILE_NAMES:
        path = folder / name
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            pattern = line.strip() if syntax == "regexp" else line.rstrip()
            if not pattern or pattern.lstrip().startswith("#"):
                continue
            if syntax == "regexp":
                try:
                    re.compile(pattern)
                except re.error as exc:
                    errors.append(
                        FileImportError(
                            filename=str(path.resolve()),
                            message=f"ignore pattern {pattern!r} is not a regular expression "
                            f"({exc}), so it ignores nothing; fix it, or set "
                            "dag_ignore_file_syntax to glob",
                            stacktrace="",
                            line=number,
                        )
                    )
                    continue
            lines.append(pattern)
    return _IgnoreRules(folder, syntax, tuple(lines)) if lines else None


def list_dag_files(
    folder: str,
    *,
    ignore_file_syntax: str = "glob",
    errors: list[FileImportError] | None = None,
) -> list[str]:
    """Python files under ``folder`` that may hold DAGs, in a stable order.

    Like Airflow's safe mode, a file is only imported if it mentions "dag" somewhere;
    names starting with "_" or "." are skipped, and so is whatever the ``.tailraceignore``
    or ``.airflowignore`` files of a folder (or its parents) match: gitignore-style globs
    by default (Airflow 3's), or regular expressions searched in the path relative to the
    ignore file's folder with ``ignore_file_syntax="regexp"``. An ignored folder is not
    entered. A pattern that cannot be used is reported in ``errors``, naming the ignore
    file and line.
    """
    errors = errors if errors is not None else []
    if ignore_file_syntax not in IGNORE_SYNTAXES:
        raise ValueError(
            f"dag_ignore_file_syntax must be one of {', '.join(IGNORE_SYNTAXES)}, "
            f"got {ignore_file_syntax!r}"
        )
    root = Path(folder)
    if root.is_file():
        return [str(root.resolve())]
    files: list[str] = []
    rules_of: dict[Path, list[_IgnoreRules]] = {}
    for current, dirs, names in os.walk(root, followlinks=True):
        here = Path(current)
        rules = list(rules_of.get(here.parent, [])) if here != root else []
        own = _read_ignore_rules(here, ignore_file_syntax, errors)
        if own is not None:
            rules.append(own)
        rules_of[here] = rules

        def ignored(path: Path, is_dir: bool, rules: list[_IgnoreRules] = rules) -> bool:
            return path.name.startswith((".", "_")) or any(r.matches(path, is_dir) for r in rules)

        dirs[:] = sorted(d for d in dirs if not ignored(here / d, True))
        for name in sorted(names):
            path = here / name
            if name.endswith(".py") and not ignored(path, False) and _mentions_dag(path):
                files.append(str(path.resolve()))
    return sorted(files)


def _mentions_dag(path: Path) -> bool:
    try:
        return b"dag" in path.read_bytes().lower()
    except OSError:
        return False


def prepare_import_path(
    dags_folder: str | Path | None = None, plugins_folder: str | Path | None = None
) -> list[str]:
    """Put the DAGs folder and the plugins folder on ``sys.path``, as Airflow does, so DAG
    files import modules beside them (``from common.utils import x``) and trigger
    classpaths such as ``my_triggers.MyTrigger`` resolve. Returns the folders added.

    Every process that imports user code calls it when it starts: the DAG parser, the
    workers (local and Celery) and the triggerer. Called with folders it also passes
    them on (through the environment) to the processes this one starts, which call it
    without arguments.
    """
    if dags_folder is not None or plugins_folder is not None:
        folders = [str(Path(f).resolve()) for f in (dags_folder, plugins_folder) if f is not None]
        # A single DAG file as the "folder": its own folder goes on the path.
        folders = [str(Path(f).parent) if Path(f).is_file() else f for f in folders]
        os.environ[IMPORT_PATH_VARIABLE] = os.pathsep.join(folders)
    else:
        raw = os.environ.get(IMPORT_PATH_VARIABLE, "")
        folders = [f for f in raw.split(os.pathsep) if f]
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)
    return folders


# How a process hands its DAG and plugins folders to the processes it starts.
IMPORT_PATH_VARIABLE = "_TAILRACE_DAG_IMPORT_PATH"


class DagFileCache:
    """Workers import each DAG file once per version: the file's and those of the modules
    it imported from the DAGs and plugins folders (path, mtime, size) (ADR 0024).

    A task runs against the code on disk when its try starts, helper modules included:
    when any user module changed, every module imported from those folders is forgotten
    (one that did not change may hold the old one's objects) and the DAG file is imported
    afresh. Thread-safe: the triggerer loads files from several threads, and an import
    registers DAGs and a module globally, so one file is imported at a time.
    """

    def __init__(self) -> None:
        self._files: dict[str, tuple[tuple[int, int], LoadedFile]] = {}
        # Modules imported from the user's folders, and their version when imported.
        self._modules: dict[str, tuple[str, tuple[int, int] | None]] = {}
        self._lock = threading.Lock()

    def get(self, path: str) -> LoadedFile:
        version = _version(path)
        with self._lock:
            if self._helpers_changed():
                self._forget_user_modules()
            cached = self._files.get(path)
            if cached is not None and cached[0] == version:
                return cached[1]
            loaded = load_dag_file(path)
            self._files[path] = (version, loaded)
            self._note_user_modules()
            return loaded

    def _helpers_changed(self) -> bool:
        return any(_version_or_none(file) != seen for file, seen in self._modules.values())

    def _forget_user_modules(self) -> None:
        for name, (file, seen) in self._modules.items():
            sys.modules.pop(name, None)
            if _version_or_none(file) != seen:
                # Bytecode is checked by mtime in whole seconds and size: an edit within
                # the second that keeps the size would load the stale bytecode.
                with contextlib.suppress(OSError, ValueError, NotImplementedError):
                    os.unlink(importlib.util.cache_from_source(file))
        self._modules.clear()
        self._files.clear()
        importlib.invalidate_caches()

    def _note_user_modules(self) -> None:
        folders = tuple(os.path.join(f, "") for f in _user_folders())
        if not folders:
            return
        # A copy in one call: another thread importing meanwhile (a trigger's class
        # loaded in the triggerer's thread pool) changes sys.modules, and building a list
        # of its items allocates a tuple each, so a collection in between can switch
        # threads and the iteration fail ("dictionary changed size during iteration").
        for name, module in sys.modules.copy().items():
            file = getattr(module, "__file__", None)
            if name in self._modules or not isinstance(file, str) or not file.startswith(folders):
                continue
            if name.startswith(DAG_MODULE_PREFIX):
                continue  # a DAG file itself: versioned in _files
            self._modules[name] = (file, _version_or_none(file))


def _version(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size)


def _version_or_none(path: str) -> tuple[int, int] | None:
    try:
        return _version(path)
    except OSError:
        return None


def _user_folders() -> list[str]:
    """The DAGs and plugins folders this process imports user modules from."""
    raw = os.environ.get(IMPORT_PATH_VARIABLE, "")
    return [f for f in raw.split(os.pathsep) if f]
