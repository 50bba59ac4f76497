"""Curves drawn in a terminal with Braille dots (2 × 4 per character), a y axis labelled
with its values and an x axis with its steps; and the same curves as a plain table for a
terminal that is not one (a pipe, a file). Pure: the caller colours the segments.
"""

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from overbrainer.projections.curves import Point

Segment = tuple[str, str | None]
"""A piece of a line of text and its style (a colour name; None: plain)."""

_BRAILLE = 0x2800
# The bit of each dot of a Braille cell, by (column, row).
_DOT = {
    (0, 0): 0x01,
    (0, 1): 0x02,
    (0, 2): 0x04,
    (0, 3): 0x40,
    (1, 0): 0x08,
    (1, 1): 0x10,
    (1, 2): 0x20,
    (1, 3): 0x80,
}
STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_white", "bright_cyan")
"""The colours given to the series, in order."""


@dataclass(frozen=True)
class Series:
    """One curve: its name in the legend, its points (x, y) and its colour."""

    name: str
    points: Sequence[Point]
    style: str = "cyan"
    marks: bool = False  # drawn as points too (an evaluation every so many steps)


def number(value: float) -> str:
    """An axis label: three significant digits, short."""
    if value == 0:
        return "0"
    text = f"{value:.3g}"
    return text.replace("e-0", "e-").replace("e+0", "e")


def _range(values: Sequence[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    if high - low < 1e-12:
        pad = abs(high) * 0.1 or 0.5
        return low - pad, high + pad
    return low, high


def _line(a: tuple[int, int], b: tuple[int, int]) -> list[tuple[int, int]]:
    """The dots from ``a`` to ``b`` (Bresenham)."""
    (x0, y0), (x1, y1) = a, b
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    error = dx + dy
    dots = []
    while True:
        dots.append((x0, y0))
        if (x0, y0) == (x1, y1):
            return dots
        twice = 2 * error
        if twice >= dy:
            error += dy
            x0 += sx
        if twice <= dx:
            error += dx
            y0 += sy


MARKS = ("•", "+", "x", "o", "^", "~", "=", "%")
"""The characters that draw the series, in order, where there is no colour."""
SHARED = "#"
"""Where there is no colour, the character of a place several series pass through."""


def chart(
    series: Sequence[Series],
    *,
    width: int,
    height: int = 12,
    x_label: str = "step",
    plain: bool = False,
) -> list[list[Segment]]:
    """The lines of a chart of ``series`` at most ``width`` characters wide, its plot
    ``height`` characters high, with a legend under it. Empty when nothing is drawable.

    ``plain`` (no colour to tell them apart): each series is drawn with its own character
    of :data:`MARKS`, a place that several share with :data:`SHARED`; else with Braille
    dots in its colour, the series drawn last on top. Either way the legend names a series
    that no place shows alone, and the one it coincides with."""
    drawn = [s for s in series if any(math.isfinite(y) for _, y in s.points)]
    if not drawn:
        return []
    xs = [x for s in drawn for x, _ in s.points]
    ys = [y for s in drawn for _, y in s.points if math.isfinite(y)]
    x_low, x_high = _range(xs)
    y_low, y_high = _range(ys)
    labels = [number(y_high), number((y_high + y_low) / 2), number(y_low)]
    pad = max(len(label) for label in labels)
    plot_width = max(10, width - pad - 2)
    # A character holds 2 × 4 Braille dots; a mark is one character.
    dots_w, dots_h = (plot_width, height) if plain else (plot_width * 2, height * 4)

    def to_dot(x: float, y: float) -> tuple[int, int]:
        px = round((x - x_low) / (x_high - x_low) * (dots_w - 1))
        py = round((y_high - y) / (y_high - y_low) * (dots_h - 1))
        return min(max(px, 0), dots_w - 1), min(max(py, 0), dots_h - 1)

    cells: dict[tuple[int, int], int] = {}
    owners: dict[tuple[int, int], list[int]] = {}  # by the order they were drawn in
    for index, one in enumerate(drawn):
        points = [to_dot(x, y) for x, y in one.points if math.isfinite(y)]
        dots = set(points)
        for a, b in itertools.pairwise(points):
            dots.update(_line(a, b))
        if one.marks and not plain:
            for px, py in points:
                dots.update((px + dx, py) for dx in (-1, 1) if 0 <= px + dx < dots_w)
        for px, py in dots:
            cell = (px, py) if plain else (px // 2, py // 4)
            if not plain:
                cells[cell] = cells.get(cell, 0) | _DOT[(px % 2, py % 4)]
            if index not in owners.setdefault(cell, []):
                owners[cell].append(index)

    def shown(cell: tuple[int, int]) -> Segment:
        which = owners[cell]
        if plain:
            return (MARKS[which[0] % len(MARKS)] if len(which) == 1 else SHARED, None)
        return (chr(_BRAILLE + cells[cell]), drawn[which[-1]].style)

    lines: list[list[Segment]] = []
    for row in range(height):
        label = labels[0] if row == 0 else labels[2] if row == height - 1 else ""
        if row == height // 2 and height > 2:
            label = labels[1]
        line: list[Segment] = [(f"{label:>{pad}} ┤" if label else f"{'':>{pad}} │", None)]
        for column in range(plot_width):
            line.append(shown((column, row)) if (column, row) in owners else (" ", None))
        lines.append(_merge(line))
    lines.append([(f"{'':>{pad}} └" + "─" * plot_width, None)])
    left, right = f"{x_label} {number(x_low)}", number(x_high)
    gap = max(1, plot_width - len(left) - len(right))
    lines.append([(f"{'':>{pad}}  {left}{' ' * gap}{right}", None)])
    legend: list[Segment] = [(f"{'':>{pad}}  ", None)]
    for index, one in enumerate(drawn):
        key = MARKS[index % len(MARKS)] if plain else "━━"
        legend += [(key, None if plain else one.style), (f" {one.name}   ", None)]
    if plain and any(len(which) > 1 for which in owners.values()):
        legend.append((f"{SHARED} several", None))
    lines.append(_merge(legend))
    lines += [[(f"{'':>{pad}}  {note}", None)] for note in _hidden(drawn, owners, plain)]
    return lines


def _hidden(
    drawn: Sequence[Series], owners: dict[tuple[int, int], list[int]], plain: bool
) -> list[str]:
    """A note for each series that no place shows alone (plain) or on top (in colour):
    which series it coincides with, and how the chart shows them (once for a pair)."""
    notes: list[str] = []
    told: set[frozenset[int]] = set()
    for index, one in enumerate(drawn):
        places = [which for which in owners.values() if index in which]
        own = [w for w in places if (w == [index] if plain else w[-1] == index)]
        if own or not places:
            continue
        partners = Counter(o for which in places for o in which if o != index)
        partner = partners.most_common(1)[0][0]
        if frozenset((index, partner)) in told:
            continue
        told.add(frozenset((index, partner)))
        other = drawn[partner].name
        if plain:
            notes.append(f"{one.name} and {other} coincide: drawn as {SHARED}")
        else:
            notes.append(f"{one.name} is hidden under {other}: their curves coincide")
    return notes


def _merge(line: list[Segment]) -> list[Segment]:
    merged: list[Segment] = []
    for text, style in line:
        if merged and merged[-1][1] == style:
            merged[-1] = (merged[-1][0] + text, style)
        else:
            merged.append((text, style))
    return merged


_SGR = {
    "cyan": "36",
    "magenta": "35",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "red": "31",
    "bright_white": "97",
    "bright_cyan": "96",
}


def plain_text(lines: Sequence[Sequence[Segment]]) -> str:
    """The chart's lines without their styles."""
    return "\n".join("".join(text for text, _ in line).rstrip() for line in lines)


def ansi_text(lines: Sequence[Sequence[Segment]]) -> str:
    """The chart's lines coloured for a terminal (ANSI colours)."""
    out = []
    for line in lines:
        parts = [
            f"\x1b[{_SGR[style]}m{text}\x1b[0m" if style in _SGR else text for text, style in line
        ]
        out.append("".join(parts).rstrip())
    return "\n".join(out)


def table(series: Sequence[Series], *, rows: int = 12, x_label: str = "step") -> list[str]:
    """The curves as a table for a reader that is not a terminal: one column per series,
    one row per step of a sample (every point of a series with fewer than ``rows``; else
    ``rows`` steps evenly spread, the first and the last among them)."""
    steps = sorted({x for s in series for x, _ in s.points})
    if not steps:
        return []
    if len(steps) > rows:
        picked = {steps[round(i * (len(steps) - 1) / (rows - 1))] for i in range(rows)}
        # Every point of a sparse series (an evaluation now and then) is worth a row.
        for one in series:
            if len(one.points) <= rows:
                picked.update(x for x, _ in one.points)
        steps = sorted(picked)
    values = [dict(s.points) for s in series]
    heads = [x_label, *(s.name for s in series)]
    body = [
        [number(x) if x != int(x) else str(int(x)), *(_cell(v.get(x)) for v in values)]
        for x in steps
    ]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(heads)]
    out = ["  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return out


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:#.4g}".rstrip(".")
