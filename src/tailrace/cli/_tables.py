"""Tables that stay readable at 80 columns: every column headed; ids never cut (their
column is as wide as the longest, up to a limit); long values fold onto further lines
instead of ending in "…"."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

from rich.table import Table
from rich.text import Text

# An id column is never narrower than its longest value, up to this many characters.
MAX_KEY_WIDTH = 40


def make_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    keys: Collection[int] = (0,),
    right: Collection[int] = (),
    show_lines: bool = False,
) -> Table:
    """A table of ``rows`` (cells may hold rich markup) under ``headers``; columns
    numbered in ``keys`` hold ids and are never cut, those in ``right`` are numbers."""
    assert all(headers), "every column needs a header"
    table = Table(title=title, show_lines=show_lines)
    for i, header in enumerate(headers):
        widths = [Text.from_markup(row[i]).cell_len for row in rows if row[i]]
        widest = max([len(header), *widths])
        if i in keys:
            table.add_column(
                header, min_width=min(widest, MAX_KEY_WIDTH), overflow="fold", no_wrap=False
            )
        else:
            table.add_column(header, justify="right" if i in right else "left", overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def relative(path: str, folders: Sequence[Path]) -> str:
    """``path`` relative to the first of ``folders`` holding it, else as it is."""
    for folder in folders:
        try:
            return str(Path(path).relative_to(folder.resolve()))
        except ValueError:
            continue
    return path
