"""Plain-text tables for terminal summaries (Markdown syntax, so they paste into issues)."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; the first row is the header, numeric-looking columns right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    numeric = [all(_is_number(row[i]) for row in rows[1:]) for i in range(len(widths))]

    def line(row: Sequence[str]) -> str:
        cells = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(row, widths, numeric, strict=True)
        ]
        return "| " + " | ".join(cells) + " |"

    rule = "|" + "|".join(
        "-" * (w + 1) + (":" if r else "-") for w, r in zip(widths, numeric, strict=True)
    )
    return "\n".join([line(rows[0]), rule + "|", *(line(row) for row in rows[1:])])


def _is_number(text: str) -> bool:
    """Numbers (``1,234`` too) and ``-`` (no value) right-align."""
    try:
        float(text.replace(",", ""))
    except ValueError:
        return text == "-"
    return True
