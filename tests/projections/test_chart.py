"""Loss curves: the points of a run's metrics lines, drawn with Braille dots to a width, or
given as a table to a reader that is not a terminal."""

import math

import pytest

from overbrainer.projections.chart import Series, chart, number, plain_text, table
from overbrainer.projections.curves import curves_of, thin
from overbrainer.train.metrics import MetricsEvent


def _log(step: int, loss: float | None = None, eval_loss: float | None = None) -> MetricsEvent:
    return MetricsEvent(event="log", step=step, loss=loss, eval_loss=eval_loss)


def test_curves_take_one_point_per_step_and_leave_out_what_cannot_be_drawn() -> None:
    curves = curves_of(
        [
            MetricsEvent(event="begin", max_steps=4),
            _log(1, 2.0),
            _log(2, math.nan),
            _log(2, eval_loss=1.5),
            _log(3, 1.0),
            _log(3, 0.9),  # a line read twice, or corrected: the latest wins
            _log(4, math.inf, eval_loss=1.2),
            MetricsEvent(event="phase", phase="saving_adapter"),
        ]
    )
    assert curves.loss == ((1.0, 2.0), (3.0, 0.9))
    assert curves.eval_loss == ((2.0, 1.5), (4.0, 1.2))
    assert curves.final() == (3.0, 0.9) and curves.best("eval_loss") == (4.0, 1.2)
    assert curves_of([]).empty


def test_thinning_keeps_the_ends_and_every_spike() -> None:
    points = [(float(i), 1.0) for i in range(10_000)]
    points[5_000] = (5_000.0, 9.0)
    kept = thin(points, 200)
    assert len(kept) <= 210
    assert kept[0] == points[0] and kept[-1] == points[-1] and (5_000.0, 9.0) in kept
    assert thin(points[:50], 200) == points[:50]


@pytest.mark.parametrize("width", [30, 60, 100, 200])
def test_a_chart_fits_its_width_and_puts_the_ends_of_a_curve_in_its_corners(width: int) -> None:
    falling = Series("loss", [(0.0, 3.0), (100.0, 1.0)])
    lines = chart([falling], width=width, height=8)
    text = plain_text(lines).splitlines()
    assert all(len(line) <= width for line in text)
    plot = text[:8]
    assert plot[0].startswith("3 ┤") and plot[-1].startswith("1 ┤")
    assert plot[4].startswith("2 ┤")  # the middle of the axis
    # The first point is the top left dot, the last the bottom right one.
    top, bottom = plot[0].split("┤", 1)[1], plot[-1].split("┤", 1)[1]
    assert ord(top[0]) - 0x2800 & 0x01
    assert ord(bottom.rstrip()[-1]) - 0x2800 & 0x80
    assert text[9].split() == ["step", "0", "100"]
    assert text[10].split() == ["━━", "loss"]


def test_two_curves_keep_their_colours_and_a_flat_one_is_drawn_mid_height() -> None:
    lines = chart(
        [Series("a", [(0.0, 1.0), (10.0, 1.0)], "cyan"), Series("b", [(5.0, 1.0)], "magenta")],
        width=40,
        height=5,
    )
    styles = {style for line in lines for _, style in line if style}
    assert styles == {"cyan", "magenta"}
    drawn = [i for i, line in enumerate(lines[:5]) if any(style for _, style in line)]
    assert drawn == [2]
    assert chart([Series("x", [(0.0, math.nan)])], width=40) == []


def test_off_a_terminal_the_curves_are_a_table_of_sampled_steps_with_every_evaluation() -> None:
    loss = Series("loss", [(float(i), 10.0 / i) for i in range(1, 1001)])
    evals = Series("eval_loss", [(float(i), 9.0 / i) for i in (250, 500, 750, 1000)])
    rows = table([loss, evals], rows=6)
    assert rows[0].split() == ["step", "loss", "eval_loss"]
    steps = [int(row.split()[0]) for row in rows[1:]]
    assert steps[0] == 1 and steps[-1] == 1000
    assert {250, 500, 750, 1000} <= set(steps)
    assert rows[-1].split() == ["1000", "0.01000", "0.009000"]
    assert table([]) == []


@pytest.mark.parametrize(
    ("value", "text"), [(0.0, "0"), (1.23456, "1.23"), (0.000123, "0.000123"), (2e-7, "2e-7")]
)
def test_axis_numbers_are_short(value: float, text: str) -> None:
    assert number(value) == text


def test_without_colour_each_series_has_its_own_mark_and_the_legend_names_it() -> None:
    falling = Series("loss", [(0.0, 3.0), (100.0, 1.0)], "cyan")
    rising = Series("eval_loss", [(0.0, 1.0), (100.0, 3.0)], "magenta", marks=True)
    text = plain_text(chart([falling, rising], width=40, height=9, plain=True)).splitlines()
    plot = "".join(line.split("┤", 1)[-1].split("│", 1)[-1] for line in text[:9])
    assert {"•", "+"} <= set(plot) and not any(ord(c) >= 0x2800 for c in plot)
    assert text[0].split("┤")[1].strip()[0] == "•"  # the falling one starts top left
    assert text[8].split("┤")[1].strip()[0] == "+"  # the rising one bottom left
    assert set(text[4].split("┤")[1].strip()) == {"#"}  # where they cross: both
    assert text[11].split() == ["•", "loss", "+", "eval_loss", "#", "several"]
    assert len(text) == 12  # neither hides the other: no note


def test_coinciding_curves_stay_visible_and_the_legend_says_which_hides_which() -> None:
    same = [(float(step), 2.5 / (1 + 0.5 * step)) for step in range(1, 41)]
    first, second = Series("ab12", same, "cyan"), Series("cd34", same, "magenta")
    plain = plain_text(chart([first, second], width=50, height=8, plain=True)).splitlines()
    plot = "".join(line.split("┤", 1)[-1].split("│", 1)[-1] for line in plain[:8])
    assert set(plot) - {" "} == {"#"}
    assert plain[10].split() == ["•", "ab12", "+", "cd34", "#", "several"]
    assert plain[11].strip() == "ab12 and cd34 coincide: drawn as #"
    coloured = chart([first, second], width=50, height=8)
    assert {style for line in coloured[:8] for _, style in line if style} == {"magenta"}
    assert plain_text(coloured).splitlines()[11].strip() == (
        "ab12 is hidden under cd34: their curves coincide"
    )
