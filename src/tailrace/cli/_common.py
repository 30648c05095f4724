"""What every command shares: settings, the database, the console, error reporting.

Imports here are what `tailrace --help` pays for: typer and rich's console only. The
rest is imported inside functions, when a command needs it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from tailrace.config import Settings

console = Console()
err_console = Console(stderr=True)

# Settings given as options: name -> (value, the option).
_overrides: dict[str, tuple[object, str]] = {}


def set_overrides(*, dags_folder: Path | None) -> None:
    if dags_folder is not None:
        set_override("dags_folder", dags_folder, "--dags-folder")


def set_override(name: str, value: object, option: str) -> None:
    _overrides[name] = (value, option)


def settings() -> Settings:
    """The settings: defaults < config file < environment < command-line options."""
    from tailrace.config import load_settings, override

    loaded = load_settings(os.environ)
    for name, (value, option) in _overrides.items():
        loaded = override(loaded, name, value, f"option {option}")
    if not Path(loaded.dags_folder).exists():
        raise CliError(
            f"the dags folder {loaded.dags_folder} does not exist; "
            "pass --dags-folder or set TAILRACE_DAGS_FOLDER"
        )
    return loaded


def database(s: Settings | None = None) -> Engine:
    """An engine on the metadata database, migrated first when it is behind."""
    from tailrace.db import create_engine
    from tailrace.db.revisions import upgrade_if_behind

    engine = create_engine((s or settings()).database_url)
    upgrade_if_behind(engine)
    return engine


def print_json(data: Any) -> None:
    """One JSON document on stdout, plain (no colour, no wrapping): scripts parse it."""
    print(json.dumps(data, default=str))


class CliError(Exception):
    """An error to print as one line and exit 1 on."""
