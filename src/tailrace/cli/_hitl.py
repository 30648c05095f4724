"""`tailrace hitl`: the human-in-the-loop requests of deferred HITL tasks, and a response
given from the terminal. Airflow 3.1 has no such command; these follow its REST API
(`GET /hitlDetails`, `PATCH /hitlDetails/{dag_id}/{run_id}/{task_id}`) and validate in the
same place it does (`tailrace.hitl.respond`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import typer

from tailrace.cli._common import CliError, console, database, print_json

app = typer.Typer(
    help="Human in the loop: what HITL tasks ask, and answering them.", no_args_is_help=True
)

MAP_INDEX = typer.Option(-1, "--map-index", help="The instance of a mapped task.")
AS_JSON = typer.Option(False, "--json", help="Print JSON.")


def _public(found: Mapping[str, Any]) -> dict[str, Any]:
    """A request as the REST API gives it (without the database's row id)."""
    return {k: v for k, v in found.items() if k != "ti_id"}


def _status(found: Mapping[str, Any]) -> str:
    if found["response_received"]:
        return "answered" if found["responded_by"] else "timed out"
    return "waiting" if found["task_instance_state"] == "deferred" else "not waiting"


@app.command("list")
def list_(
    dag_id: str = typer.Option(None, "--dag-id", help="Only this DAG's requests."),
    pending: bool = typer.Option(False, "--pending", help="Only those not answered yet."),
    as_json: bool = AS_JSON,
) -> None:
    """Requests, oldest first, with their responses."""
    from rich.markup import escape

    from tailrace.cli._tables import make_table
    from tailrace.db import read_only_engine
    from tailrace.store import hitl as store

    with read_only_engine(database()).connect() as conn:
        rows = store.details(
            conn, dag_id=dag_id, response_received=False if pending else None, limit=10_000
        )
    if as_json:
        print_json([_public(r) for r in rows])
        return
    table = make_table(
        ("dag_id", "run_id", "task_id", "subject", "status", "response"),
        [
            (
                escape(r["dag_id"]),
                escape(r["dag_run_id"]),
                escape(r["task_id"] + (f" [{r['map_index']}]" if r["map_index"] >= 0 else "")),
                escape(r["subject"]),
                _status(r),
                escape(_response(r)),
            )
            for r in rows
        ],
        title="Human-in-the-loop requests",
        keys=(0, 1, 2, 4),
        prose=(3, 5),
    )
    console.print(table)


def _response(found: Mapping[str, Any]) -> str:
    if not found["response_received"]:
        return ""
    return f"{', '.join(found['chosen_options'])} by {found['responded_by'] or 'the timeout'}"


@app.command("show")
def show(
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int = MAP_INDEX,
    as_json: bool = AS_JSON,
) -> None:
    """What a task asks (subject, body, options, params) and its response, if any."""
    from tailrace import hitl
    from tailrace.db import read_only_engine

    with read_only_engine(database()).connect() as conn:
        try:
            found = hitl.find_request(conn, dag_id, run_id, task_id, map_index)
        except hitl.HITLRequestNotFoundError as exc:
            raise CliError(str(exc)) from None
    if as_json:
        print_json(_public(found))
        return
    _print_request(found)


def _print_request(found: Mapping[str, Any]) -> None:
    from tailrace.cli._tables import make_table

    say = console.print
    say(f"{found['subject']}", markup=False, highlight=False, style="bold")
    if found["body"]:
        say(found["body"], markup=False, highlight=False)
    defaults = found["defaults"] or []
    options = ", ".join(f"{o} (default)" if o in defaults else o for o in found["options"])
    say(f"Options: {options}", markup=False, highlight=False)
    say("Several may be chosen." if found["multiple"] else "One may be chosen.")
    if found["params"]:
        say(
            make_table(
                ("param", "default", "schema", "description"),
                [
                    (
                        name,
                        json.dumps(p.get("value")),
                        json.dumps(p.get("schema") or {}),
                        p.get("description") or "",
                    )
                    for name, p in found["params"].items()
                ],
                prose=(2, 3),
            ),
            markup=False,
        )
    say(f"Status: {_status(found)}", highlight=False)
    if found["response_received"]:
        say(f"Response: {_response(found)} at {found['responded_at']}", markup=False)
        if found["params_input"]:
            say(f"Params: {json.dumps(found['params_input'])}", markup=False, highlight=False)


def _params_input(
    request: Mapping[str, Any], param: list[str], params_json: str | None, where: str
) -> dict[str, Any]:
    """The params of the response: the request's defaults, then --params-json, then each
    --param (text for a string param, else JSON)."""
    params: Mapping[str, Any] = request["params"] or {}
    values = {name: p.get("value") for name, p in params.items()}
    if params_json is not None:
        try:
            given = json.loads(params_json)
        except ValueError as exc:
            raise CliError(f"--params-json is not JSON ({exc})") from None
        if not isinstance(given, dict):
            raise CliError('--params-json must be a JSON object: {"name": value, …}')
        values.update(given)
    for item in param:
        name, sep, raw = item.partition("=")
        if not sep:
            raise CliError(f"--param {item!r}: write it as NAME=VALUE")
        if name not in params:
            raise CliError(
                f"--param {name!r}: the {where} has no such param; its params are "
                f"{sorted(params) or 'none'}"
            )
        values[name] = _value(raw, (params[name].get("schema") or {}).get("type"))
    return values


def _value(raw: str, schema_type: Any) -> Any:
    if schema_type == "string":
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@app.command("respond")
def respond(
    dag_id: str,
    run_id: str,
    task_id: str,
    option: list[str] = typer.Option(
        ..., "--option", "-o", help="An option to choose (repeat it for a multiple request)."
    ),
    param: list[str] = typer.Option(
        [],
        "--param",
        "-p",
        help="A param as NAME=VALUE (repeatable): text for a string param, else JSON.",
    ),
    params_json: str = typer.Option(None, "--params-json", help="The params as one JSON object."),
    map_index: int = MAP_INDEX,
    user: str = typer.Option(
        None, "--user", help="Who responds, as recorded (default: your login name)."
    ),
    as_json: bool = AS_JSON,
) -> None:
    """Answer a waiting request; the task resumes within its trigger's poke interval.
    Params not given keep their defaults."""
    import getpass

    from tailrace import hitl
    from tailrace.db import read_only_engine

    engine = database()
    where = hitl.describe(dag_id, run_id, task_id, map_index)
    try:
        with read_only_engine(engine).connect() as conn:
            request = hitl.find_request(conn, dag_id, run_id, task_id, map_index)
        found = hitl.respond(
            engine,
            dag_id,
            run_id,
            task_id,
            map_index,
            chosen_options=option,
            params_input=_params_input(request, param, params_json, where),
            responded_by=user or getpass.getuser(),
        )
    except hitl.HITLResponseError as exc:
        raise CliError(str(exc)) from None
    if as_json:
        print_json(_public(found))
        return
    console.print(
        f"Responded to {where}: {_response(found)}",
        markup=False,
        highlight=False,
    )
