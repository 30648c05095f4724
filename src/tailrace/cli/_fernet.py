"""`tailrace rotate-fernet-key`: re-encrypt stored connections with the first Fernet key."""

from __future__ import annotations

import typer

from tailrace.cli import app
from tailrace.cli._common import console, settings
from tailrace.connections import FernetKeys, rotate_fernet_key
from tailrace.db import create_engine, upgrade


@app.command("rotate-fernet-key")
def rotate(as_json: bool = typer.Option(False, "--json")) -> None:
    """Re-encrypt every stored connection with the first key of fernet_key.

    To change keys: set fernet_key to "NEW,OLD" on every component, run this, then set it
    to "NEW". Connections stored before encryption are encrypted too.
    """
    s = settings()
    engine = create_engine(s.database_url)
    upgrade(engine)
    keys = FernetKeys.from_settings(s)
    count = rotate_fernet_key(engine, keys)
    if as_json:
        console.print_json(data={"connections": count, "key": keys.source})
        return
    console.print(f"{count} connection(s) re-encrypted with the first key of {keys.source}")
