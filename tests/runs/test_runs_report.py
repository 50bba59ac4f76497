"""``runs report``: one self-contained HTML page, opened in a real headless Chromium — it
loads with no console error and no request but its own file, and its charts are drawn (the
drawn SVG elements measured by the browser) — for one run and for a comparison of three;
and ``runs compare`` of the same three. The screenshot in docs/commands.md is the one this test
takes (``OVERBRAINER_SCREENSHOT=docs/report.png`` writes it there)."""

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.events.aggregate import fold
from overbrainer.events.store import Recorded
from overbrainer.projections.compare import RunFacts
from overbrainer.projections.curves import Curves
from overbrainer.projections.report import nice_ticks, report_html
from tests.fakes.browser import file_url, headless_chromium
from tests.runs.conftest import Project

# What the browser says of the drawn charts: every SVG chart with its size on the page,
# its curves (their points, their drawn length and box), marks, and the timeline's phases.
MEASURE = """JSON.stringify({
  title: document.title,
  charts: [...document.querySelectorAll("svg.chart")].map(svg => {
    const box = svg.getBoundingClientRect();
    return {id: svg.id, width: box.width, height: box.height,
      series: [...svg.querySelectorAll("polyline.series")].map(p => ({
        name: p.dataset.name, points: p.points.numberOfItems, recorded: +p.dataset.points,
        length: p.getTotalLength(), width: p.getBBox().width, height: p.getBBox().height,
        colour: p.getAttribute("stroke")})),
      marks: svg.querySelectorAll("circle.mark").length};
  }),
  phases: [...document.querySelectorAll("svg.timeline rect.phase")].map(r => ({
    name: r.dataset.name, width: r.getBoundingClientRect().width})),
  differ: [...document.querySelectorAll("table.settings")].length ?
    [...document.querySelector("table.settings").querySelectorAll("tr")].map(
      tr => [...tr.children].map(c => c.textContent)) : [],
  events: document.querySelectorAll("table.events tr").length - document.querySelectorAll(
    "table.events").length,
  scripts: document.scripts.length,
  external: [...document.querySelectorAll("[src],[href]")].length,
})"""


def _train(project: Project, steps: int, rate: str) -> str:
    done = project.run(
        "train", FAKE_AXOLOTL_STEPS=str(steps), OVERBRAINER_TRAINING__LEARNING_RATE=rate
    )
    assert done.returncode == 0, done.stderr
    return project.runs()[-1]


def test_a_runs_report_page_loads_offline_and_draws_its_charts(
    project: Project, tmp_path: Path
) -> None:
    data = project.path / "data"
    (data / "eval.jsonl").write_text((data / "train.jsonl").read_text().splitlines()[0] + "\n")
    first = _train(project, 30, "2e-4")
    second = _train(project, 20, "1e-4")
    third = _train(project, 12, "5e-5")

    one = project.run("runs", "report", first[-4:])
    assert one.returncode == 0, one.stderr
    page = project.path / "runs" / first / "report.html"
    assert one.stdout == f"wrote {page}\n"
    three = project.run("runs", "report", first, second, third, "-o", str(tmp_path / "c.html"))
    assert three.returncode == 0, three.stderr
    compared = tmp_path / "c.html"
    text = compared.read_text()
    assert "<script" not in text and "http://" not in text.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )

    with headless_chromium() as browser:
        visit = browser.visit(file_url(page))
        assert visit.errors() == []
        assert visit.requests == [file_url(page)]  # nothing but the page itself
        seen = json.loads(browser.evaluate(MEASURE))
        screenshot = browser.screenshot()
    assert seen["title"] == f"overbrainer: Run {first}"
    assert seen["scripts"] == 0 and seen["external"] == 0
    (chart,) = seen["charts"]
    assert chart["id"] == "chart-loss" and chart["width"] > 600 and chart["height"] > 200
    loss, evals = chart["series"]
    assert (loss["name"], loss["points"], loss["recorded"]) == ("loss", 30, 30)
    assert (evals["name"], evals["points"]) == ("eval_loss", evals["recorded"])
    assert evals["points"] >= 4 and chart["marks"] == evals["points"]
    for drawn in (loss, evals):
        assert drawn["length"] > 300 and drawn["width"] > 500 and drawn["height"] > 50
    assert [phase["name"].split()[0] for phase in seen["phases"]] == [
        "starting",
        "training,",
        "ending",
    ]
    assert all(phase["width"] >= 2 for phase in seen["phases"])
    assert seen["differ"][0] == ["setting", "value"]
    assert ["learning_rate", "0.0002"] in seen["differ"]
    assert seen["events"] == 4  # Created, JobStarted, ArtifactsRetrieved, Ended
    assert screenshot.startswith(b"\x89PNG\r\n\x1a\n") and len(screenshot) > 20_000

    with headless_chromium() as browser:
        visit = browser.visit(file_url(compared))
        assert visit.errors() == []
        assert visit.requests == [file_url(compared)]
        seen = json.loads(browser.evaluate(MEASURE))
        shot = browser.screenshot()
    assert seen["title"] == "overbrainer: 3 runs compared"
    loss_chart, eval_chart = seen["charts"]
    assert [s["name"] for s in loss_chart["series"]] == [first, second, third]
    assert [s["points"] for s in loss_chart["series"]] == [30, 20, 12]
    # Each run keeps its colour in both charts.
    assert [s["colour"] for s in eval_chart["series"]] == [
        s["colour"] for s in loss_chart["series"]
    ]
    assert len({s["colour"] for s in loss_chart["series"]}) == 3
    # The longest run spans the chart; the others end part of the way along.
    widths = [s["width"] for s in loss_chart["series"]]
    assert widths[0] > 700 and widths[0] > widths[1] > widths[2] > 100
    assert len(seen["phases"]) == 9
    assert seen["differ"][0] == ["setting", first, second, third]
    assert ["learning_rate", "0.0002", "0.0001", "5e-05"] in seen["differ"]
    target = os.environ.get("OVERBRAINER_SCREENSHOT")
    if target:
        Path(target).write_bytes(shot)

    # runs compare: the same three side by side.
    side = project.run("runs", "compare", first, second, third, "--no-plot")
    assert side.returncode == 0, side.stderr
    lines = side.stdout.splitlines()
    assert lines[0].split() == [first, second, third]
    assert lines[8].split()[:2] == ["final", "loss"] and "(step 30)" in lines[8]
    assert lines[-1].split() == ["learning_rate", "0.0002", "0.0001", "5e-05"]
    assert "settings that differ:" in lines
    rows = [
        json.loads(line)
        for line in project.run("runs", "compare", first, third, "--json").stdout.splitlines()
    ]
    assert [row["id"] for row in rows] == [first, third]
    assert rows[1]["settings_that_differ"] == {"learning_rate": "5e-05"}
    assert len(rows[0]["loss"]) == 30 and rows[0]["state"] == "succeeded"
    once = project.run("runs", "compare", first)
    assert once.returncode == 2 and "needs two runs or more" in once.stderr
    twice = project.run("runs", "compare", first, first[-4:])
    assert twice.returncode == 2 and "named more than once" in twice.stderr


def test_a_report_escapes_whatever_a_run_recorded() -> None:
    hostile = '<img src=x onerror="alert(1)">'
    created = ev.RunCreated(
        run_id="20260101-100000-aaaa", target="t", kind="local", remote_dir="r",
        settings_digest="d", base_model=hostile, adapter="lora",
    )  # fmt: skip
    ended = ev.RunEnded(state="failed", message=f"</table>{hostile}")
    at = "2026-01-01T10:00:00Z"
    state = fold([(created, at), (ended, at)])
    records = tuple(
        Recorded(run_id=created.run_id, seq=i + 1, at=at, actor={}, event=e)
        for i, e in enumerate((created, ended))
    )
    facts = RunFacts(state, records, Curves(((1.0, 2.0),), ()), {"base_model": json.dumps(hostile)})
    page = report_html([facts], generated_at=datetime(2026, 1, 2, tzinfo=UTC), version="9")
    assert "<img" not in page and "</table><img" not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert "default-src 'none'" in page


def test_axis_ticks_are_round_numbers_within_the_range() -> None:
    assert nice_ticks(0.0, 1.0) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert nice_ticks(0.37, 2.91) == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert nice_ticks(1.0, 30.0, 6) == [5.0, 10.0, 15.0, 20.0, 25.0, 30.0]
    assert nice_ticks(2.0, 2.0) == [2.0]
