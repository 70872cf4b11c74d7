"""Plain-text tables for terminal summaries (Markdown syntax, so they paste into issues)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def printable(text: str) -> str:
    """``text`` safe for a terminal: control characters (an escape sequence in a node name
    would act on the terminal), bidirectional controls (which would reorder what follows)
    and lone surrogates (which cannot be encoded) as escapes, ``\\x1b``, ``\\u202e``,
    ``\\ud800``."""
    return _UNPRINTABLE.sub(lambda found: found[0].encode("unicode_escape").decode(), text)


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; the first row is the header, numeric-looking columns right-aligned.
    Cells are made :func:`printable`, and their ``|`` escaped."""
    rows = [[printable(cell).replace("|", "\\|") for cell in row] for row in rows]
    widths = [max(_width(row[i]) for row in rows) for i in range(len(rows[0]))]
    numeric = [all(_is_number(row[i]) for row in rows[1:]) for i in range(len(widths))]

    def line(row: Sequence[str]) -> str:
        cells = []
        for cell, width, right in zip(row, widths, numeric, strict=True):
            padding = " " * (width - _width(cell))
            cells.append(padding + cell if right else cell + padding)
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


def _width(text: str) -> int:
    """Terminal columns of ``text``: wide (CJK) characters take two, combining marks none."""
    if text.isascii():
        return len(text)
    return sum(
        0
        if unicodedata.combining(char)
        else 2
        if unicodedata.east_asian_width(char) in ("W", "F")
        else 1
        for char in text
    )


def plural(count: int, noun: str) -> str:
    """``1 trace``, ``2 traces``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
