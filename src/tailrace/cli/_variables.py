from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer

from tailrace.cli._common import CliError, console, database, print_json

app = typer.Typer(
    help="Variables (Airflow's Variable): settings tasks and templates read by key.",
    no_args_is_help=True,
)


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Variables from the database and from TAILRACE_VAR_* environment variables, values
    of secret-looking keys masked. An environment variable wins over a stored one."""
    from rich.markup import escape

    from tailrace.cli._tables import make_table
    from tailrace.sdk.variables import ENV_PREFIX, masked_value
    from tailrace.variables import list_variables

    data: dict[str, dict[str, str | None]] = {
        v.key: {
            "key": v.key,
            "value": v.masked_value,
            "description": v.description,
            "source": "database",
        }
        for v in list_variables(database())
    }
    for name, value in os.environ.items():
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            key = name.removeprefix(ENV_PREFIX).lower()
            data[key] = {
                "key": key,
                "value": masked_value(key, value),
                "description": None,
                "source": f"env {name}",
            }
    rows = [data[k] for k in sorted(data)]
    if as_json:
        print_json(rows)
        return
    table = make_table(
        ("key", "value", "source", "description"),
        [
            (
                escape(r["key"] or ""),
                escape(r["value"] or ""),
                escape(r["source"] or ""),
                escape(r["description"] or ""),
            )
            for r in rows
        ],
        title="Variables",
        prose=(1, 3),
    )
    console.print(table)


@app.command("get")
def get(
    key: str = typer.Argument(...),
    default: str = typer.Option(None, "--default", help="Print this when there is no such key."),
    as_json: bool = typer.Option(False, "--json", help="Print the value decoded as JSON."),
) -> None:
    """Print a variable's value as tasks see it (TAILRACE_VAR_<KEY> first, unmasked)."""
    from tailrace.sdk import NOTSET
    from tailrace.sdk.variables import Variable
    from tailrace.variables import variables_from

    with variables_from(database()):
        try:
            fallback = NOTSET if default is None else default
            value = Variable.get(key, fallback, deserialize_json=as_json)
        except KeyError as exc:
            raise CliError(str(exc)) from None
    if as_json:
        print_json(value)
    else:
        sys.stdout.write(f"{value}\n")


@app.command("set")
def set_(
    key: str = typer.Argument(...),
    value: str = typer.Argument(...),
    description: str = typer.Option(None, "--description"),
    as_json: bool = typer.Option(
        False, "--json", help="VALUE is JSON: check it parses before storing it."
    ),
) -> None:
    """Store a variable in the metadata database (replacing it)."""
    from tailrace.sdk.variables import masked_value
    from tailrace.variables import set_variable

    if as_json:
        try:
            json.loads(value)
        except ValueError as exc:
            raise CliError(f"the value of {key!r} is not JSON ({exc})") from None
    set_variable(database(), key, value, description)
    console.print(f"Variable {key!r} set: {masked_value(key, value)}", markup=False)


@app.command("delete")
def delete(key: str = typer.Argument(...)) -> None:
    """Delete a stored variable."""
    from tailrace.variables import delete_variable

    if not delete_variable(database(), key):
        raise CliError(f"no stored variable {key!r}; see `tailrace variables list`")
    console.print(f"Variable {key!r} deleted", markup=False)


@app.command("import")
def import_(
    path: Path = typer.Argument(..., help="A JSON file of {key: value}, as `export` writes."),
) -> None:
    """Set every variable of a JSON file in one transaction (values that are not strings
    are stored as JSON)."""
    from tailrace.variables import import_variables

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise CliError(f"{path} must hold a JSON object of key: value, not {type(data).__name__}")
    count = import_variables(database(), data)
    console.print(f"{count} variables imported from {path}", markup=False)


@app.command("export")
def export(
    path: Path = typer.Argument(None, help="Write here (else print to standard output)."),
) -> None:
    """Every stored variable as a JSON object of key: value, unmasked (for `import`)."""
    from tailrace.variables import export_variables

    text = json.dumps(export_variables(database()), indent=2, sort_keys=True)
    if path is None:
        sys.stdout.write(text + "\n")
        return
    path.write_text(text + "\n")
    os.chmod(path, 0o600)  # it holds the values unmasked
    console.print(f"Variables exported to {path}", markup=False)
