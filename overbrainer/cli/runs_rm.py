"""``runs rm RUN…`` and ``runs gc --older-than SPAN [--keep-best N] [--delete]``: removing
finished runs' files from this machine, their events kept.

Which runs may go is :mod:`overbrainer.lifecycle.removal`'s to decide; sizes and removal
are :mod:`overbrainer.lifecycle.run_files`'. Each run's removal is recorded first
(``run.FilesRemoved``), then its directory is renamed aside and deleted — shielded, so a
Ctrl-C lets the run in hand finish and stops before the next. Removal is idempotent: a
removal cut short harder (a killed process) is finished by running the command again.
"""

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from overbrainer.cli.common import open_store, print_json, require_project
from overbrainer.cli.context import Invocation, current
from overbrainer.cli.listing import listing, resolve_run
from overbrainer.errors import OverbrainerError, UsageError
from overbrainer.events import decisions
from overbrainer.events.aggregate import RunLog
from overbrainer.events.home import has_local_files, this_host
from overbrainer.front.interrupts import Interrupts, open_interrupts, print_notice
from overbrainer.lifecycle import removal
from overbrainer.lifecycle.run_files import clear_leftovers, disk_usage, remove_run_dir
from overbrainer.plurals import plural
from overbrainer.projections.files import run_dir
from overbrainer.projections.words import size_text
from overbrainer.session.journal import Journal

REMOVE_LIMIT = 3600.0
"""How long removing one run's directory may take (a large output on a slow disk)."""


def clock() -> datetime:
    """This machine's time now, which runs' ages are measured against (tests replace it)."""
    return datetime.now(UTC)


@dataclass
class _Door:
    """What removing needs: the project, its log and the command's Ctrl-C state."""

    invocation: Invocation
    journal: Journal
    interrupts: Interrupts

    @property
    def project(self) -> Path:
        return self.invocation.project_dir


@asynccontextmanager
async def _door() -> AsyncIterator[_Door]:
    invocation = current()
    require_project(invocation)
    store = open_store(invocation)
    try:
        journal = Journal(store, invocation.project_dir)
        async with open_interrupts(print_notice) as interrupts:
            yield _Door(invocation, journal, interrupts)
    finally:
        store.close()


async def _elsewhere(door: _Door, state: RunLog) -> str | None:
    """The host of the checkout that started the run, when its files are there, not here."""
    directory = run_dir(door.project, state.run.run_id)
    if await trio.to_thread.run_sync(has_local_files, directory):
        return None
    home = await door.journal.home(state)
    return home.host if home is not None and not home.on_this_host else None


async def _remove(door: _Door, state: RunLog) -> int:
    """Record the run's files removed, then remove them (shielded); the bytes freed."""
    run_id = state.run.run_id
    directory = run_dir(door.project, run_id)
    size = await trio.to_thread.run_sync(disk_usage, directory)

    async def work() -> None:
        await door.journal.append(run_id, lambda s: decisions.files_removed(s, size))
        await trio.to_thread.run_sync(remove_run_dir, directory)

    await door.interrupts.shield(f"removing the files of run {run_id}", REMOVE_LIMIT, work)
    return size


async def _finish(door: _Door, state: RunLog) -> int | None:
    """A run recorded removed: remove what a removal cut short left of its directory;
    the bytes freed, None when nothing was left."""
    directory = run_dir(door.project, state.run.run_id)
    if not directory.exists():
        return None
    size = await trio.to_thread.run_sync(disk_usage, directory)
    await door.interrupts.shield(
        f"removing the files of run {state.run.run_id}",
        REMOVE_LIMIT,
        lambda: trio.to_thread.run_sync(remove_run_dir, directory),
    )
    return size


def _stopped(door: _Door, done: int, total: int, freed: int, again: str) -> int:
    print(
        f"stopped after Ctrl-C: removed the files of {done} of {plural(total, 'run')} "
        f"({size_text(freed)} freed); `{again}` removes the rest",
        file=sys.stderr,
        flush=True,
    )
    return door.interrupts.exit_code


async def remove_runs(refs: Sequence[str]) -> int:
    """``runs rm RUN…``: remove each run's files, refusing (with why and what to do) a run
    that is not ended or whose pod may still exist."""
    if not refs:
        raise UsageError("runs rm needs a run: overbrainer runs rm RUN [RUN…]")
    async with _door() as door:
        ids: list[str] = []
        for ref in refs:
            run_id = resolve_run(door.invocation, ref)
            if run_id not in ids:
                ids.append(run_id)
        refused: list[str] = []
        freed = removed = 0
        for index, run_id in enumerate(ids):
            if door.interrupts.interrupted:
                rest = " ".join(ids[index:])
                return _stopped(door, removed, len(ids), freed, f"overbrainer runs rm {rest}")
            state = await door.journal.state(run_id)
            if state.run.files_removed is not None:
                size = await _finish(door, state)
                when = str(state.run.files_removed.get("at", ""))[:16].replace("T", " ")
                if size is None:
                    print(f"run {run_id}: its files were removed already ({when} UTC)")
                else:
                    freed += size
                    print(
                        f"removed runs/{run_id}/ ({size_text(size)} freed): the rest of a "
                        f"removal cut short ({when} UTC)"
                    )
                continue
            why = removal.refusal(state, elsewhere=await _elsewhere(door, state))
            if why is not None:
                refused.append(why)
                continue
            size = await _remove(door, state)
            freed += size
            removed += 1
            print(
                f"removed runs/{run_id}/ ({size_text(size)} freed); its events stay: "
                f"`overbrainer events {run_id}`"
            )
        await trio.to_thread.run_sync(clear_leftovers, door.project / "runs")
        if removed > 1:
            print(f"freed {size_text(freed)} in {plural(removed, 'run')}")
    if len(refused) == 1:
        raise OverbrainerError(f"not removed: {refused[0]}")
    if refused:
        for why in refused:
            print(f"not removed: {why}", file=sys.stderr)
        raise OverbrainerError(f"{len(refused)} of the runs named were not removed (see above)")
    return 0


def _gc_command(older_than: str, keep_best: int) -> str:
    best = f" --keep-best {keep_best}" if keep_best else ""
    return f"overbrainer runs gc --older-than {older_than.strip()}{best} --delete"


async def collect_garbage(
    *, older_than: str, keep_best: int = 0, delete: bool = False, json: bool = False
) -> int:
    """``runs gc``: the files of the runs created more than ``older_than`` ago (but the
    ``keep_best`` best), shown (a dry run) or, with ``delete``, removed."""
    try:
        span = removal.parse_age(older_than)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if keep_best < 0:
        raise UsageError("--keep-best takes a number of runs, 0 or more")
    async with _door() as door:
        states, hosts = listing(door.invocation)
        here = this_host()
        elsewhere = {
            run_id: host
            for run_id, host in hosts.items()
            if host not in ("", here) and not has_local_files(run_dir(door.project, run_id))
        }
        plan = removal.collect(
            states,
            now=clock(),
            older_than=span,
            keep_best=keep_best,
            elsewhere=elsewhere,
        )
        sizes = {
            state.run.run_id: await trio.to_thread.run_sync(
                disk_usage, run_dir(door.project, state.run.run_id)
            )
            for state in plan.remove
        }
        if not delete:
            _show_plan(plan, sizes, older_than, keep_best, json=json)
            return 0
        freed = removed = 0
        for state in plan.remove:
            run_id = state.run.run_id
            if door.interrupts.interrupted:
                again = _gc_command(older_than, keep_best)
                return _stopped(door, removed, len(plan.remove), freed, again)
            fresh = await door.journal.state(run_id)
            why = removal.refusal(fresh)
            if why is not None or fresh.run.files_removed is not None:
                # Another command changed the run since it was listed.
                _say_left(run_id, why or "its files were removed meanwhile", json=json)
                continue
            size = await _remove(door, fresh)
            freed += size
            removed += 1
            if json:
                print_json(_row(fresh, size, "removed"))
            else:
                print(f"removed runs/{run_id}/ ({size_text(size)} freed)")
        for left in plan.left:
            _say_left(left.run_id, left.why, json=json)
        await trio.to_thread.run_sync(clear_leftovers, door.project / "runs")
        if not json:
            if removed:
                print(
                    f"freed {size_text(freed)} in {plural(removed, 'run')}; their events "
                    "stay (`overbrainer runs ls --all` lists them)"
                )
            else:
                print(_nothing(plan, older_than))
    return 0


def _row(state: RunLog, size: int | None, action: str, why: str = "") -> dict[str, Any]:
    return {
        "id": state.run.run_id,
        "state": state.run.state,
        "created": state.run.created_at,
        "bytes": size,
        "action": action,
        "why": why,
    }


def _say_left(run_id: str, why: str, *, json: bool) -> None:
    if json:
        print_json({"id": run_id, "action": "left", "why": why})
    else:
        print(f"left {run_id}: {why}")


def _show_plan(
    plan: removal.Collection, sizes: dict[str, int], older_than: str, keep_best: int, *, json: bool
) -> None:
    if json:
        for state in plan.remove:
            print_json(_row(state, sizes[state.run.run_id], "remove"))
        for left in plan.left:
            print_json({"id": left.run_id, "action": "left", "why": left.why})
        return
    if plan.remove:
        heads = ["RUN", "STATE", "CREATED", "SIZE"]
        table = [
            [
                s.run.run_id,
                str(s.run.state),
                (s.run.created_at or "")[:16].replace("T", " "),
                size_text(sizes[s.run.run_id]),
            ]
            for s in plan.remove
        ]
        widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(heads)]
        print(
            f"would remove the files of {plural(len(plan.remove), 'run')} created more than "
            f"{older_than.strip()} ago (a dry run: nothing is removed):"
        )
        print("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip())
        for row in table:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for left in plan.left:
        print(f"left {left.run_id}: {left.why}")
    if plan.remove:
        total = sum(sizes.values())
        print(
            f"would free {size_text(total)}; `{_gc_command(older_than, keep_best)}` removes "
            "them (their events stay)"
        )
    else:
        print(_nothing(plan, older_than))


def _nothing(plan: removal.Collection, older_than: str) -> str:
    span = older_than.strip()
    if plan.left:
        return f"no other run's files to remove: those created more than {span} ago are left"
    return f"no run's files to remove: none whose files are here was created more than {span} ago"
