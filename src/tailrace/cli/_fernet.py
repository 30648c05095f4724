"""`tailrace rotate-fernet-key`: re-encrypt stored connections with the first Fernet key."""

from __future__ import annotations

import typer

from tailrace.cli import app
from tailrace.cli._common import console, database, print_json, settings


@app.command("rotate-fernet-key")
def rotate(as_json: bool = typer.Option(False, "--json")) -> None:
    """Re-encrypt every stored connection with the first key of fernet_key.

    To change keys: set fernet_key to "NEW,OLD" on every component, run this, then set it
    to "NEW". Connections stored before encryption are encrypted too.
    """
    from tailrace.connections import FernetKeys, rotate_fernet_key

    s = settings()
    keys = FernetKeys.from_settings(s)
    count = rotate_fernet_key(database(s), keys)
    if as_json:
        print_json({"connections": count, "key": keys.source})
        return
    console.print(f"{count} connection(s) re-encrypted with the first key of {keys.source}")
