"""What every command shares: settings, the console, error reporting."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from rich.console import Console

from tailrace.config import Settings, load_settings

console = Console()
err_console = Console(stderr=True)

_overrides: dict[str, str] = {}


def set_overrides(*, dags_folder: Path | None) -> None:
    if dags_folder is not None:
        _overrides["TAILRACE_DAGS_FOLDER"] = str(dags_folder.resolve())


def settings() -> Settings:
    loaded = load_settings({**os.environ, **_overrides})
    if not Path(loaded.dags_folder).exists():
        raise CliError(
            f"the dags folder {loaded.dags_folder} does not exist; "
            "pass --dags-folder or set TAILRACE_DAGS_FOLDER"
        )
    return dataclasses.replace(loaded)


class CliError(Exception):
    """An error to print as one line and exit 1 on."""
