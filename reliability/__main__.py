"""``python -m reliability``: run the four campaigns and print one summary table.

    python -m reliability [--jobs N] [--full] [--only CAMPAIGN ...] [--targets local,ssh,runpod]
                          [--markdown FILE] [--verbose]

1. ctrl-c    — a SIGINT, and two in a row, at every checkpoint of ``train``, ``train
               attach``, ``train cancel`` (and ``pod rm``) on each target;
2. crash     — a SIGKILL just before and just after every event append, and inside every
               file transfer and API call;
3. faults    — every Runpod endpoint × every kind of bad answer; SSH dropped at each stage;
               a changed endpoint, a vanished pod; the event store failing at each append;
4. bad-input — property-based: configuration, env values, run IDs, metrics lines, training
               JSONL, hand-edited caches, hostile Runpod answers.

The checkpoints are derived by running each command once with the recorder of
``overbrainer/front/checkpoints.py``: code that adds an await or an append adds cases.
By default, on the ssh and runpod targets two Ctrl-C in a row (and a crash inside a
transfer) are delivered once per call site rather than at every await under it; ``--full``
does every checkpoint everywhere. Exit code: 0 when no invariant was violated, else 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from reliability.core import (
    CAMPAIGNS,
    RERUN,
    UNREACHED,
    Case,
    Result,
    run_cases,
    summarize,
    table,
)
from reliability.invariants import CommandLineWatch
from reliability.world import stop_live


def _args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m reliability", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--jobs", type=int, default=max(2, 2 * (os.cpu_count() or 1)))
    parser.add_argument("--full", action="store_true", help="every checkpoint, every way")
    parser.add_argument("--only", nargs="*", choices=CAMPAIGNS, default=list(CAMPAIGNS))
    parser.add_argument("--targets", default="local,ssh,runpod")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    parser.add_argument(
        "--list", action="store_true", help="trace the commands, list the cases, run none"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the campaigns; print each violation as it is found and the summary at the end."""
    args = _args(sys.argv[1:] if argv is None else argv)
    targets = [t for t in args.targets.split(",") if t]
    base = Path(tempfile.mkdtemp(prefix="overbrainer-reliability-"))
    print(f"reliability: working in {base}", flush=True)
    results: list[Result] = []
    seconds: dict[str, float] = {}

    def show(result: Result) -> None:
        if result.violations:
            print(f"VIOLATION {result.campaign}: {result.name}", flush=True)
            for violation in result.violations:
                print(f"    - {violation}", flush=True)
        elif args.verbose:
            print(f"ok {result.seconds:5.1f} s  {result.campaign}: {result.name}", flush=True)

    from reliability import plan

    with contextlib.ExitStack() as stack, CommandLineWatch() as watch:
        worlds = plan.Worlds(base, targets, stack)
        for campaign in CAMPAIGNS:
            if campaign not in args.only:
                continue
            started = time.monotonic()
            print(f"reliability: {campaign} …", flush=True)
            try:
                cases: list[Case] = plan.cases(campaign, worlds, full=args.full)
                print(f"reliability: {campaign}: {len(cases)} cases", flush=True)
                if args.list:
                    for case in cases:
                        print(f"  {case.name}")
                    continue
                found = run_cases(cases, args.jobs, show)
                if campaign == "ctrl-c":
                    found += worlds.clean  # the traced clean runs, checked as cases too
            except KeyboardInterrupt:
                print("reliability: interrupted; stopping the running commands", flush=True)
                stop_live()
                raise
            found += _sightings(campaign, watch)
            results += found
            seconds[campaign] = time.monotonic() - started
    rows = summarize(results, seconds)
    text = table(rows)
    print("\n" + text)
    if UNREACHED:
        print(
            f"\n{len(UNREACHED)} cases did not pass their checkpoint this time (a path that "
            "depends on timing); they ran and were checked all the same:"
        )
        for name in UNREACHED[:20]:
            print(f"  {name}")
    if RERUN:
        print(
            f"\n{len(RERUN)} cases timed out while being set up on a busy machine and ran "
            "again, alone; their second result counts:"
        )
        for name in RERUN[:20]:
            print(f"  {name}")
    if args.markdown is not None:
        args.markdown.write_text(table(rows, markdown=True) + "\n")
    if not args.keep:
        _remove(base)
    return 1 if any(r.violations for r in results) else 0


def _sightings(campaign: str, watch: CommandLineWatch) -> list[Result]:
    """Canaries seen on a process command line during the campaign, as a failing case."""
    seen, watch.sightings[:] = list(dict.fromkeys(watch.sightings)), []
    return [Result(campaign, "process command lines", 0.0, seen)] if seen else []


def _remove(base: Path) -> None:
    import shutil

    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
