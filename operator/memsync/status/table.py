"""Plain-text tables as kubectl prints them, shared by the status view and the CLI's listings."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], indent: str = "") -> str:
    """Left-aligned columns three spaces apart, as kubectl prints them; the last column is not padded."""
    grid = [list(headers), *[list(r) for r in rows]]
    widths = [max(len(line[i]) for line in grid) for i in range(len(headers))]
    lines = []
    for line in grid:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(line[:-1])] + [line[-1]]
        lines.append((indent + "   ".join(cells)).rstrip())
    return "\n".join(lines)
