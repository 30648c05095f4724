"""Tables that stay readable at 80 columns: every column headed, ids kept whole while
the other columns can give up width (down to their longest word), and long values
folded onto further lines instead of ending in "…"."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

from rich.table import Table
from rich.text import Text

# A prose column (an error message) gives up width down to this.
PROSE_WIDTH = 20


def make_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    keys: Collection[int] = (0,),
    right: Collection[int] = (),
    prose: Collection[int] = (),
    show_lines: bool = False,
    width: int | None = None,
) -> Table:
    """A table of ``rows`` (cells may hold rich markup) under ``headers``, for a console
    ``width`` wide (default: the terminal's); columns numbered in ``keys`` hold ids,
    those in ``right`` numbers, those in ``prose`` text that may fold mid-word."""
    assert all(headers), "every column needs a header"
    if width is None:
        from tailrace.cli._common import console

        width = console.width
    texts = [[Text.from_markup(cell).plain for cell in row] for row in rows]
    cells = [[h, *(r[i] for r in texts)] for i, h in enumerate(headers)]
    widest = [max(len(c) for c in column) for column in cells]
    words = [
        min(PROSE_WIDTH, widest[i])
        if i in prose
        else max(len(w) for c in col for w in [*c.split(), ""])
        for i, col in enumerate(cells)
    ]
    limits = _limits(widest, words, keys, width)
    table = Table(title=title, show_lines=show_lines)
    for i, header in enumerate(headers):
        table.add_column(
            header,
            justify="right" if i in right else "left",
            overflow="fold",
            max_width=limits[i],
        )
    for row in rows:
        table.add_row(*row)
    return table


def _limits(
    widest: list[int], words: list[int], keys: Collection[int], width: int
) -> list[int | None]:
    """Widths to hold the other columns to so that the id columns fit whole: each gives
    up what it can above its longest word, the roomiest first. When that is not enough,
    rich folds the ids too."""
    # Each column costs its padding and a border; the table one more border.
    over = 1 + 3 * len(widest) + sum(widest) - width
    limits: list[int | None] = [None] * len(widest)
    roomy = sorted(
        (i for i in range(len(widest)) if i not in keys), key=lambda i: words[i] - widest[i]
    )
    for i in roomy:
        if over <= 0:
            break
        give = min(over, widest[i] - max(words[i], 1))
        if give > 0:
            limits[i] = widest[i] - give
            over -= give
    return limits


def relative(path: str, folders: Sequence[Path]) -> str:
    """``path`` relative to the first of ``folders`` holding it, else as it is."""
    for folder in folders:
        try:
            return str(Path(path).relative_to(folder.resolve()))
        except ValueError:
            continue
    return path
