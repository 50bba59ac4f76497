"""Cases, their results and the summary table.

A *case* is one injected event and the checks after it: a name, the campaign it belongs
to, and a function returning the invariant violations it found (an empty list: none) —
or, for a property-based case, how many generated examples it ran and their violations.
A case that raises counts as one violation (``harness: …``), so a broken case can never
look like a clean one.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

CAMPAIGNS = (
    "ctrl-c",
    "signals",
    "outputs",
    "crash",
    "faults",
    "clocks",
    "paths",
    "bad-input",
    "recovery",
    "node-lost",
)

UNREACHED: list[str] = []
"""Cases whose command did not pass their checkpoint this time (a path that depends on
timing, such as a poll that found the job already ended): reported, not counted."""


@dataclass(frozen=True)
class Case:
    """One injected event and its checks."""

    campaign: str
    name: str
    run: Callable[[], list[str] | tuple[int, list[str]]]
    weight: float = 1.0  # a rough cost, so the heaviest start first


@dataclass
class Result:
    """What a case found."""

    campaign: str
    name: str
    seconds: float
    violations: list[str] = field(default_factory=list)
    count: int = 1  # the cases it stands for (a property's generated examples)


def run_case(case: Case) -> Result:
    """Run one case, timing it; an exception is a violation of its own."""
    started = time.monotonic()
    count = 1
    try:
        outcome = case.run()
        if isinstance(outcome, tuple):
            count, found = outcome[0], list(outcome[1])
        else:
            found = list(outcome)
    except Exception as error:  # the harness must report, never stop the campaign
        tail = "".join(traceback.format_exception(error)[-3:]).strip().replace("\n", " | ")
        found = [f"harness: {type(error).__name__}: {error} ({tail[-400:]})"]
    return Result(case.campaign, case.name, time.monotonic() - started, found, count)


RERUN: list[str] = []
"""Cases whose harness timed out setting them up (a machine too busy) and that ran again,
alone, once the others were done: their second result is the one counted."""


def _timed_out(result: Result) -> bool:
    return bool(result.violations) and all(
        v.startswith("harness: TimeoutError") for v in result.violations
    )


def run_cases(
    cases: Sequence[Case], jobs: int, on_result: Callable[[Result], None] | None = None
) -> list[Result]:
    """Run ``cases`` on ``jobs`` threads (each case mostly waits on its subprocesses).

    A case whose harness timed out is run once more, alone, at the end: on a loaded machine
    a setup step can miss its time limit, and only a second time-out (a real hang) counts.
    """
    ordered = sorted(cases, key=lambda c: -c.weight)
    by_name = {case.name: case for case in ordered}
    results: list[Result] = []
    again: list[Case] = []
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        for future in as_completed([pool.submit(run_case, case) for case in ordered]):
            result = future.result()
            if _timed_out(result):
                again.append(by_name[result.name])
                continue
            results.append(result)
            if on_result is not None:
                on_result(result)
    finally:
        # Interrupted: the cases not started are dropped; the running ones end with
        # their commands, which the caller stops.
        pool.shutdown(wait=True, cancel_futures=True)
    for case in again:
        RERUN.append(case.name)
        result = run_case(case)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


@dataclass
class Row:
    """One campaign's line of the summary."""

    campaign: str
    cases: int
    violations: int
    slowest: str
    slowest_seconds: float
    seconds: float


def summarize(results: Iterable[Result], seconds: dict[str, float]) -> list[Row]:
    """Per campaign: cases run, invariant violations, the slowest case."""
    rows: list[Row] = []
    by: dict[str, list[Result]] = {}
    for result in results:
        by.setdefault(result.campaign, []).append(result)
    for campaign in CAMPAIGNS:
        found = by.get(campaign, [])
        if not found:
            continue
        slow = max(found, key=lambda r: r.seconds)
        rows.append(
            Row(
                campaign=campaign,
                cases=sum(r.count for r in found),
                violations=sum(len(r.violations) for r in found),
                slowest=slow.name,
                slowest_seconds=slow.seconds,
                seconds=seconds.get(campaign, 0.0),
            )
        )
    return rows


def table(rows: Sequence[Row], *, markdown: bool = False) -> str:
    """The summary as a text (or Markdown) table."""
    head = ("campaign", "cases", "violations", "slowest case", "time")
    body = [
        (
            r.campaign,
            str(r.cases),
            str(r.violations),
            f"{r.slowest} ({r.slowest_seconds:.1f} s)",
            f"{r.seconds:.0f} s",
        )
        for r in rows
    ]
    total = (
        "total",
        str(sum(r.cases for r in rows)),
        str(sum(r.violations for r in rows)),
        "",
        f"{sum(r.seconds for r in rows):.0f} s",
    )
    lines = [head, *body, total]
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(cells) + " |" for cells in [*body, total]]
        return "\n".join(out)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in lines
    )
