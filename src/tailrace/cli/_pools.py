from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from tailrace.cli._common import CliError, console, database, print_json, settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

app = typer.Typer(
    help="Pools: named slots that limit how many task instances using them run at once.",
    no_args_is_help=True,
)


def _engine() -> Engine:
    from tailrace.store import pools

    engine = database()
    with engine.begin() as conn:
        pools.ensure_default_pool(conn, settings().default_pool_task_slot_count)
    return engine


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Every pool with its slots and how many its task instances take now."""
    from rich.markup import escape

    from tailrace.cli._tables import make_table
    from tailrace.store import pools

    with _engine().connect() as conn:
        rows = pools.usage(conn)
    if as_json:
        print_json([p.as_dict() for p in rows])
        return
    table = make_table(
        ("pool", "slots", "running", "queued", "deferred", "open", "description"),
        [
            (
                escape(p.name),
                str(p.slots),
                str(p.running),
                str(p.queued),
                f"{p.deferred}{' *' if p.include_deferred else ''}",
                str(p.open),
                escape(p.description or ""),
            )
            for p in rows
        ],
        title="Pools",
        right=(1, 2, 3, 4, 5),
        prose=(6,),
    )
    if any(p.include_deferred for p in rows):
        table.caption = "* its deferred task instances take slots too (--include-deferred)"
    console.print(table)


@app.command("set")
def set_(
    name: str = typer.Argument(..., help="The pool's name, as tasks give it in pool=."),
    slots: int = typer.Argument(..., help="How many slots it has (0 holds its tasks back)."),
    description: str = typer.Argument(None, help="What the pool is for."),
    include_deferred: bool = typer.Option(
        False, "--include-deferred", help="Deferred task instances take slots too."
    ),
) -> None:
    """Create a pool, or change its slots, description and --include-deferred."""
    from tailrace.store import pools

    try:
        with _engine().begin() as conn:
            created = pools.set_pool(conn, name, slots, description, include_deferred)
    except pools.PoolError as exc:
        raise CliError(str(exc)) from None
    console.print(
        f"Pool {name!r} {'created' if created else 'updated'}: {slots} slots", markup=False
    )


@app.command("delete")
def delete(name: str = typer.Argument(...)) -> None:
    """Delete a pool (not default_pool). Its tasks wait until a pool of that name exists."""
    from tailrace.store import pools

    try:
        with _engine().begin() as conn:
            pools.delete_pool(conn, name)
    except pools.PoolError as exc:
        raise CliError(str(exc)) from None
    console.print(f"Pool {name!r} deleted", markup=False)
