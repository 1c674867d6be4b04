"""The report tables (specexp.output.tables) as drawn in the terminal: fitted to its width
without cutting a figure, their marks coloured."""

from __future__ import annotations

from typing import Optional, Sequence

from rich.console import Group
from rich.markup import escape
from rich.table import Table

from specexp.output.tables import Rows
from specexp.output.terminal.screen import console

_STYLE = {
    "faster": "green",
    "slower": "red",
    "equivalent": "cyan",
    "inconclusive": "yellow",
    "cannot test": "magenta",
    "caveat": "magenta",  # confounded by drift, or not attributable
    "reproduced": "green",
    "contradicted": "red",
    "not measured": "dim",
}


def rich_table(title: str, rows: Rows) -> Group:
    """The rows as tables that fit the console's width without cutting a figure: cells wrap
    at spaces only, and columns that do not fit beside the first go on to a table of their
    own, with the first column repeated."""
    cells = [[rows.headers[c], *(r[c] for r in rows.rows)] for c in range(len(rows.headers))]
    least = [max(len(w) for cell in column for w in [*cell.split(), ""]) for column in cells]
    natural = [max(len(cell) for cell in column) for column in cells]
    groups: list[list[int]] = [[]]
    for column in range(1, len(rows.headers)):
        if groups[-1] and _drawn(least, [0, *groups[-1], column]) > console.width:
            groups.append([])
        groups[-1].append(column)
    tables = []
    for i, group in enumerate(groups):
        columns = [0, *group]
        widths = {c: natural[c] for c in columns}
        # Narrow the widest column that can be narrowed, one character at a time.
        while _drawn(list(widths.values()), range(len(widths))) > console.width:
            narrowable = [c for c in columns if widths[c] > least[c]]
            if not narrowable:  # words wider than the console: it overflows, nothing is cut
                break
            widths[max(narrowable, key=widths.__getitem__)] -= 1
        tables.append(_table(title if i == 0 else "", rows, widths))
    return Group(*tables)


def _drawn(widths: Sequence[int], columns: Sequence[int]) -> int:
    """A table's drawn width: its columns' widths, a space either side, and the rules."""
    return sum(widths[c] + 3 for c in columns) + 1


def _table(title: str, rows: Rows, widths: dict[int, int]) -> Table:
    table = Table(title=title or None, title_justify="left")
    for column, width in widths.items():
        header = rows.headers[column]
        left = header in ("configuration", "claim", "point")
        table.add_column(header, justify="left" if left else "right", width=width)
    marked = rows.headers.index(rows.marked) if rows.marked else None
    for row, mark in zip(rows.rows, rows.marks, strict=True):
        table.add_row(*(_styled(row[c], mark) if c == marked else row[c] for c in widths))
    return table


def _styled(cell: str, mark: Optional[str]) -> str:
    style = _STYLE.get(mark or "")
    return f"[{style}]{escape(cell)}[/]" if style else cell
