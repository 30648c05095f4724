"""Virtual environments for ``PythonVirtualenvOperator`` and ``@task.virtualenv``: made
once per set of requirements (a hash of them names the folder), then reused, so a task
whose environment exists starts in the time it takes to start Python.

Building one is guarded by a file lock, so two workers wanting the same environment build
it once; it is built beside its final place and renamed there when complete, so a
half-built environment is never used (a build killed midway leaves only a ``.tmp``
folder, cleared by the next build).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tailrace.sdk.errors import FailTask


@dataclass(frozen=True)
class VenvSpec:
    """What makes two environments the same."""

    requirements: tuple[str, ...]
    python_version: str | None
    system_site_packages: bool
    pip_install_options: tuple[str, ...]
    index_urls: tuple[str, ...]

    def key(self, interpreter: str) -> str:
        fields = {
            "requirements": self.requirements,
            "python": interpreter,
            "system_site_packages": self.system_site_packages,
            "pip_install_options": self.pip_install_options,
            "index_urls": self.index_urls,
        }
        text = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_cache_path() -> Path:
    """``$TAILRACE_HOME/venvs`` (``~/.tailrace/venvs``)."""
    home = os.environ.get("TAILRACE_HOME") or os.path.expanduser("~/.tailrace")
    return Path(home) / "venvs"


def find_interpreter(python_version: str | None) -> str:
    """The interpreter for ``python_version`` ("3.12", "3"): this worker's own when None
    or the same version; else ``python<version>`` on PATH, checked to be that version.
    Raises FailTask naming the version when there is none."""
    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    if python_version is None or own.startswith(str(python_version)):
        return sys.executable
    name = f"python{python_version}"
    found = shutil.which(name)
    if found is not None:
        probe = subprocess.run(
            [found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip().startswith(str(python_version)):
            return found
    raise FailTask(
        f"python_version={python_version!r} is not installed on this worker: no working "
        f"{name} on PATH. Install Python {python_version} there, or leave python_version "
        f"out to use the worker's Python {own}."
    )


def existing_interpreter(python: str, *, where: str) -> Path:
    """``python`` (``ExternalPythonOperator``'s), checked to be an executable file on this
    worker. Raises FailTask naming ``where`` (the DAG and task) and the path when not."""
    path = Path(python)
    if not path.is_absolute():
        problem = "is not an absolute path"
    elif not path.exists():
        problem = "does not exist on this worker"
    elif not path.is_file():
        problem = "is not a file"
    elif not os.access(path, os.X_OK):
        problem = "is not executable"
    else:
        return path
    raise FailTask(
        f"{where}: python={python!r} {problem}. Point python at an interpreter installed on "
        "every worker (a virtualenv's bin/python, say), or use @task.virtualenv to have "
        "Tailrace build one."
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def _run(command: Sequence[str | os.PathLike[str]], what: str) -> None:
    done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{what} failed (exit code {done.returncode}):\n{done.stdout}{done.stderr}".rstrip()
        )


def _build(spec: VenvSpec, interpreter: str, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    venv_args = ["--without-pip"]
    if spec.system_site_packages:
        venv_args.append("--system-site-packages")
    _run([interpreter, "-m", "venv", *venv_args, str(target)], "creating the virtualenv")
    if not spec.requirements:
        return
    # This worker's pip installs into the new environment: no pip of its own to bootstrap.
    pip = [sys.executable, "-m", "pip", "--python", str(_python_of(target)), "install"]
    if spec.index_urls:
        pip += ["--index-url", spec.index_urls[0]]
        for url in spec.index_urls[1:]:
            pip += ["--extra-index-url", url]
    _run([*pip, *spec.pip_install_options, *spec.requirements], "pip install")


def ensure_venv(spec: VenvSpec, cache_path: Path | None = None) -> tuple[Path, bool]:
    """The environment's Python, building the environment first if it is not cached;
    and whether it was built now."""
    interpreter = find_interpreter(spec.python_version)
    cache = cache_path or default_cache_path()
    venv = cache / f"venv-{spec.key(interpreter)}"
    if _python_of(venv).exists():
        return _python_of(venv), False
    with _locked(cache / f"venv-{spec.key(interpreter)}.lock"):
        if _python_of(venv).exists():  # another worker built it meanwhile
            return _python_of(venv), False
        building = venv.with_name(venv.name + ".tmp")
        _build(spec, interpreter, building)
        building.rename(venv)
    return _python_of(venv), True
