"""The report page: one self-contained HTML file about one run, or comparing several — their
loss and eval-loss curves, their timelines (starting, training, ending, with the pod's
uptime and spend), what they came to, their settings and their events.

Nothing in it is fetched: no script, no font, no image, styles inline, charts as inline
SVG, and a Content-Security-Policy that lets nothing load. Pure: facts in, text out;
every text of a run's making is escaped.
"""

import contextlib
import math
from collections.abc import Sequence
from datetime import datetime
from html import escape

from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.projections.chart import Series, number
from overbrainer.projections.compare import RunFacts, differing, shown_value, summary_rows
from overbrainer.projections.curves import thin
from overbrainer.projections.spend import recorded_spend
from overbrainer.projections.timeline import describe
from overbrainer.projections.words import duration_text
from overbrainer.utc import parse_utc

COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
"""The series' colours (Okabe and Ito's, told apart by people with any colour vision)."""

_WIDTH, _HEIGHT = 920, 340
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 40, 44
_MOST_POINTS = 1500

_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: #1b1f24; background: #fff; }
main { max-width: 980px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 32px 0 8px; }
h3 { font-size: 16px; margin: 20px 0 6px; }
.meta { color: #57606a; margin: 0; }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #d8dee4;
         vertical-align: top; }
th { font-weight: 600; background: #f6f8fa; }
td.num { text-align: right; } code, .mono { font-family: ui-monospace, Menlo, Consolas,
  monospace; font-size: 13px; }
.state-succeeded { color: #1a7f37; } .state-failed { color: #cf222e; }
.state-cancelled { color: #9a6700; } .state-running { color: #0969da; }
.state-stopped { color: #8250df; }
svg { display: block; max-width: 100%; height: auto; margin: 8px 0; }
svg text { font: 12px system-ui, sans-serif; fill: #57606a; }
svg .title { font-size: 14px; font-weight: 600; fill: #1b1f24; }
svg .grid { stroke: #eaeef2; } svg .axis { stroke: #8c959f; }
details { margin: 6px 0; } summary { cursor: pointer; }
.empty { color: #57606a; font-style: italic; }
"""


# --- charts ----------------------------------------------------------------------------


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values within [low, high] (steps of 1, 2, 2.5 or 5 × 10^k)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 2.5, 5, 10)), key=lambda s: abs(s - raw))
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        if value >= low - step * 1e-9:
            ticks.append(round(value, 12))
        value += step
    return ticks or [low]


def svg_chart(title: str, series: Sequence[Series], *, chart_id: str, y_label: str) -> str:
    """A line chart of ``series`` (x: the step) as an inline SVG, with a legend; a short note
    when there is nothing to draw."""
    drawn = [s for s in series if s.points]
    if not drawn:
        return f'<p class="empty" id="{escape(chart_id)}">no {escape(y_label)} was recorded</p>'
    xs = [x for s in drawn for x, _ in s.points]
    ys = [y for s in drawn for _, y in s.points]
    x_low, x_high = min(xs), max(xs)
    y_low, y_high = min(ys), max(ys)
    if x_high - x_low < 1e-12:
        x_low, x_high = x_low - 1, x_high + 1
    if y_high - y_low < 1e-12:
        pad = abs(y_high) * 0.1 or 0.5
        y_low, y_high = y_low - pad, y_high + pad
    else:
        pad = (y_high - y_low) * 0.05
        y_low, y_high = y_low - pad, y_high + pad
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def px(x: float) -> float:
        return _LEFT + (x - x_low) / (x_high - x_low) * plot_w

    def py(y: float) -> float:
        return _TOP + (y_high - y) / (y_high - y_low) * plot_h

    parts = [
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {_WIDTH} {_HEIGHT}" '
        f'width="{_WIDTH}" height="{_HEIGHT}" role="img" aria-label="{escape(title)}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f'<text class="title" x="{_LEFT}" y="18">{escape(title)}</text>',
    ]
    for tick in nice_ticks(y_low, y_high):
        y = py(tick)
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{number(tick)}</text>'
        )
    for tick in nice_ticks(x_low, x_high, 6):
        x = px(tick)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP}" y2="{_TOP + plot_h}"/>'
            f'<text x="{x:.1f}" y="{_TOP + plot_h + 16}" text-anchor="middle">'
            f"{number(tick)}</text>"
        )
    parts.append(
        f'<line class="axis" x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{_TOP + plot_h}"/>'
        f'<line class="axis" x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{_TOP + plot_h}" '
        f'y2="{_TOP + plot_h}"/>'
        f'<text x="{_LEFT + plot_w / 2:.1f}" y="{_HEIGHT - 8}" text-anchor="middle">step</text>'
    )
    legend_x = _LEFT + 8 + len(title) * 8
    for index, one in enumerate(drawn):
        # A series may carry its colour (a run's own, across charts); else by its place.
        colour = one.style if one.style.startswith("#") else COLOURS[index % len(COLOURS)]
        points = thin(list(one.points), _MOST_POINTS)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        dash = ' stroke-dasharray="6 3"' if one.marks else ""
        parts.append(
            f'<polyline class="series" data-name="{escape(one.name)}" '
            f'data-points="{len(one.points)}" fill="none" stroke="{colour}" '
            f'stroke-width="2"{dash} points="{path}"/>'
        )
        if one.marks:
            for x, y in thin(list(one.points), 200):
                parts.append(
                    f'<circle class="mark" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" '
                    f'fill="{colour}"/>'
                )
        parts.append(
            f'<rect x="{legend_x:.0f}" y="9" width="14" height="4" fill="{colour}"/>'
            f'<text x="{legend_x + 18:.0f}" y="15">{escape(one.name)}</text>'
        )
        legend_x += 30 + len(one.name) * 7
    parts.append("</svg>")
    return "\n".join(parts)


# --- timelines -------------------------------------------------------------------------


def phases(run: RunFacts) -> list[tuple[str, datetime, datetime]]:
    """The run's life in phases, each (name, start, end): starting (its pod, on Runpod),
    training and bringing the results home, ending (recording it, deleting the pod)."""
    created, job = run.created, run.job_started
    home = run.moment(ev.ArtifactsRetrieved)
    ended = run.ended
    last = _at(run.records[-1].at) if run.records else None
    found: list[tuple[str, datetime, datetime]] = []
    starting = "starting its pod" if run.state.run.kind_facts.rents_pod else "starting"
    if created and (job or ended):
        found.append((starting, created, job or ended))  # type: ignore[arg-type]
    if job:
        until = home or ended or last
        if until:
            found.append(("training, then bringing the results home", job, until))
    begun = home or ended
    if begun and last and last > begun:
        pod = ", its pod deleted" if run.state.pod.pod_id else ""
        found.append((f"ending (the run recorded{pod})", begun, last))
    return found


def _at(text: str) -> datetime | None:
    return parse_utc(text)


def svg_timeline(run: RunFacts, chart_id: str) -> str:
    """The run's phases as one bar, each as long as it lasted."""
    spans = phases(run)
    if not spans:
        return f'<p class="empty" id="{escape(chart_id)}">no timeline yet</p>'
    start, end = spans[0][1], max(s[2] for s in spans)
    total = max((end - start).total_seconds(), 1e-9)
    width, left, bar_w = _WIDTH, 8, _WIDTH - 16
    height = 44 + 20 * len(spans)
    parts = [
        f'<svg class="timeline" id="{escape(chart_id)}" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" xmlns="http://www.w3.org/2000/svg" '
        f'aria-label="timeline of run {escape(run.run_id)}">'
    ]
    for index, (name, begin, finish) in enumerate(spans):
        x = left + (begin - start).total_seconds() / total * bar_w
        w = max(2.0, (finish - begin).total_seconds() / total * bar_w)
        colour = COLOURS[index % len(COLOURS)]
        seconds = (finish - begin).total_seconds()
        parts.append(
            f'<rect class="phase" data-name="{escape(name)}" x="{x:.1f}" y="6" '
            f'width="{w:.1f}" height="22" fill="{colour}"/>'
            f'<rect x="{left}" y="{40 + 20 * index}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{left + 16}" y="{49 + 20 * index}">{escape(name)}: '
            f"{duration_text(seconds)} (from {begin:%H:%M:%S}Z)</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


# --- the page --------------------------------------------------------------------------


def _events_table(run: RunFacts) -> str:
    state = RunLog()
    rows = []
    for record in run.records:
        sentence = describe(record.event, state)
        with contextlib.suppress(ValueError):  # the table shows the log as it is
            state.apply(record.event, record.at)
        rows.append(
            f'<tr><td class="num">{record.seq}</td>'
            f'<td class="mono">{escape(record.at[:19].replace("T", " "))}Z</td>'
            f"<td><code>{escape(record.event.name)}</code></td><td>{escape(sentence)}</td></tr>"
        )
    return (
        '<table class="events"><tr><th>#</th><th>time (UTC)</th><th>event</th>'
        "<th>what happened</th></tr>" + "".join(rows) + "</table>"
    )


def _settings_table(pairs: Sequence[tuple[str, Sequence[str]]], heads: Sequence[str]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in heads)
    body = "".join(
        f"<tr><td><code>{escape(key)}</code></td>"
        + "".join(f"<td><code>{escape(v)}</code></td>" for v in values)
        + "</tr>"
        for key, values in pairs
    )
    return f'<table class="settings"><tr><th>setting</th>{head}</tr>{body}</table>'


def _summary_table(runs: Sequence[RunFacts]) -> str:
    head = "".join(f"<th><code>{escape(run.run_id)}</code></th>" for run in runs)
    body = []
    for label, values in summary_rows(runs):
        cells = "".join(
            f'<td class="state-{escape(v)}">{escape(v)}</td>'
            if label == "state"
            else f"<td>{escape(v)}</td>"
            for v in values
        )
        body.append(f"<tr><th>{escape(label)}</th>{cells}</tr>")
    for label, values in (
        ("pod", [_pod_text(run.state) for run in runs]),
        ("result", [run.state.run.message or run.state.run.note or "-" for run in runs]),
    ):
        body.append(
            f"<tr><th>{label}</th>" + "".join(f"<td>{escape(v)}</td>" for v in values) + "</tr>"
        )
    return f'<table class="summary"><tr><th></th>{head}</tr>{"".join(body)}</table>'


def _pod_text(state: RunLog) -> str:
    pod = state.pod
    if pod.pod_id is None:
        return "-"
    parts = [pod.pod_id]
    if pod.gpu_type:
        parts.append(pod.gpu_type)
    if pod.cost_per_hour is not None:
        parts.append(f"${pod.cost_per_hour:.2f}/h")
    if pod.uptime_seconds is not None:
        parts.append(f"up {duration_text(pod.uptime_seconds)}")
    if pod.spend is not None:
        parts.append(f"spent {recorded_spend(state) or f'~${pod.spend:.2f}'}")
    return ", ".join(parts)


def report_html(runs: Sequence[RunFacts], *, generated_at: datetime, version: str) -> str:
    """The report page about ``runs`` (one run, or a comparison of several)."""
    single = len(runs) == 1
    title = f"Run {runs[0].run_id}" if single else f"{len(runs)} runs compared"
    if single:
        loss = [Series("loss", runs[0].curves.loss, COLOURS[0])]
        evals = [Series("eval_loss", runs[0].curves.eval_loss, COLOURS[1], marks=True)]
    else:
        # Each run keeps its colour in both charts.
        colour = [COLOURS[i % len(COLOURS)] for i in range(len(runs))]
        loss = [Series(r.run_id, r.curves.loss, colour[i]) for i, r in enumerate(runs)]
        evals = [
            Series(r.run_id, r.curves.eval_loss, colour[i], marks=True) for i, r in enumerate(runs)
        ]
    if single:
        curves = svg_chart(
            "training and evaluation loss",
            [loss[0], evals[0]],
            chart_id="chart-loss",
            y_label="loss",
        )
    else:
        curves = svg_chart(
            "training loss", loss, chart_id="chart-loss", y_label="training loss"
        ) + svg_chart(
            "evaluation loss", evals, chart_id="chart-eval-loss", y_label="evaluation loss"
        )
    timelines = "".join(
        (f"<h3><code>{escape(run.run_id)}</code></h3>" if not single else "")
        + svg_timeline(run, f"timeline-{run.run_id}")
        for run in runs
    )
    if single:
        settings = (
            _settings_table(
                [(k, [shown_value(v)]) for k, v in sorted(runs[0].settings.items())], ["value"]
            )
            if runs[0].settings
            else '<p class="empty">the run\'s files (axolotl.yaml) are not in this checkout</p>'
        )
    else:
        differ = differing(runs)
        settings = (
            "<h3>settings that differ</h3>" + _settings_table(differ, [run.run_id for run in runs])
            if differ
            else '<p class="empty">the same settings in every run</p>'
        ) + "".join(
            f"<details><summary>every setting of <code>{escape(run.run_id)}</code></summary>"
            + _settings_table(
                [(k, [shown_value(v)]) for k, v in sorted(run.settings.items())], ["value"]
            )
            + "</details>"
            for run in runs
        )
    events = "".join(
        (
            _events_table(run)
            if single
            else f"<details><summary>events of <code>{escape(run.run_id)}</code> "
            f"({len(run.records)})</summary>{_events_table(run)}</details>"
        )
        for run in runs
    )
    when = generated_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>overbrainer: {escape(title)}</title>
<style>{_STYLE}</style>
</head>
<body>
<main>
<h1>{escape(title)}</h1>
<p class="meta">written by overbrainer {escape(version)} at {when}</p>
<h2 id="summary">What it came to</h2>
{_summary_table(runs)}
<h2 id="curves">Loss</h2>
{curves}
<h2 id="timeline">Timeline</h2>
{timelines}
<h2 id="settings">Settings</h2>
{settings}
<h2 id="events">Events</h2>
{events}
</main>
</body>
</html>
"""
