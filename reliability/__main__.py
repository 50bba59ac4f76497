"""``python -m reliability``: run the ten campaigns and print one summary table.

    python -m reliability [--jobs N] [--full] [--only CAMPAIGN ...] [--targets local,ssh,runpod]
                          [--match TEXT ...] [--markdown FILE] [--verbose]

1. ctrl-c    — a SIGINT, and two in a row, at every checkpoint of ``train``, ``train
               attach``, ``train cancel`` (and ``pod rm``) on each target;
2. signals   — SIGTERM and SIGHUP, once or twice in a row, where SIGINT goes;
3. outputs   — stdout or stderr broken (EPIPE, EIO, closed) at a checkpoint, alone or with
               the signal that comes with it (Ctrl-C through ``| tee``, a terminal gone);
4. crash     — a SIGKILL just before and just after every event append, and inside every
               file transfer and API call;
5. faults    — every Runpod endpoint × every kind of bad answer; SSH dropped at each stage;
               a changed endpoint, a vanished pod; the event store failing at each append;
6. clocks    — this machine's clock 3 h behind, 2 years ahead, or jumping 2 h mid-run;
7. paths     — the targets' worlds again from a project at a non-ASCII, quoted, spaced path;
8. bad-input — property-based: configuration, env values, run IDs, metrics lines, training
               JSONL, hand-edited caches, hostile Runpod answers.
9. recovery  — a Runpod run's pod lost (vanished or stopped) at each phase of its job, its
               job stalled, its recovery short of capacity, killed or Ctrl-C'd, its
               recoveries used up: the run goes on, on a new pod, or fails saying why.
10. node-lost — node 1 of a Runpod run's cluster of two vanishes or fails at each phase
               (its nodes booting, ready, its job running, its results coming home): the
               run fails naming the node (or, before the job, goes on on a new cluster),
               and ``train`` deletes every cluster it made.

The ctrl-c campaign also runs ``train`` on a Runpod cluster of two pods and sends Ctrl-C
(once, and twice at appends) at each code site that it passes and a pod's commands do not.

The checkpoints are derived by running each command once with the recorder of
``overbrainer/front/fault_injection.py``: code that adds an await or an append adds cases.
By default, on the ssh and runpod targets two Ctrl-C in a row (and a crash inside a
transfer) are delivered once per call site rather than at every await under it, and each
code site of each target gets one of the signals and outputs faults, in turn (SIGTERM at
every site inside a checkpoint's retrieval); the background fetch of checkpoints counts
once per code site on every target, not once per save. ``--full`` does every fault at
every checkpoint everywhere. Exit code: 0 when no invariant was
violated, else 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
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
from reliability.recovery import OBSERVED
from reliability.world import snapshot_sources, stop_live


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
    parser.add_argument(
        "--match",
        nargs="*",
        default=[],
        help="run only the cases whose name contains one of these (e.g. checkpoints_home)",
    )
    return parser.parse_args(argv)


def unignore_stop_signals() -> None:
    """Let the commands the campaigns start receive SIGINT, SIGTERM and SIGHUP.

    A signal ignored here (a background job of a non-interactive shell ignores SIGINT,
    ``nohup`` SIGHUP) would be ignored by every command too, which keeps an ignored signal
    ignored: a Ctrl-C case would then test nothing (a command runs to its end, exit 0) or
    hang. A handler that does nothing is as good as ignoring here, and reset by ``exec``.
    """
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, lambda _signum, _frame: None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the campaigns; print each violation as it is found and the summary at the end."""
    args = _args(sys.argv[1:] if argv is None else argv)
    unignore_stop_signals()
    targets = [t for t in args.targets.split(",") if t]
    base = Path(tempfile.mkdtemp(prefix="overbrainer-reliability-"))
    print(f"reliability: working in {base}", flush=True)
    snapshot_sources(base / "src")
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
                if args.match:
                    cases = [c for c in cases if any(m in c.name for m in args.match)]
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
    if OBSERVED:
        print("\nWhat each interrupted recovery came to (noted, not asserted):")
        for line in OBSERVED:
            print(f"  {line}")
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
