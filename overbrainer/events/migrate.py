"""``store migrate``: copy a checkout's SQLite history into a team store, idempotently.

Stored events are copied as they are (topic and serialized state), so each keeps its
original time and actor, and in the source's append order, so the team store's
notification log tells the same story. Per run, the target's version says what is already
there: a second migration copies only what is missing, and nothing twice. A run whose
events in the team store differ from this checkout's is never touched (it is reported).

Each batch is one transaction: an interrupted migration leaves every run with a prefix of
its events, and running it again completes it.
"""

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from overbrainer.errors import OverbrainerError
from overbrainer.events.store import RunStore
from overbrainer.plurals import plural

_READ = 1000
_BATCH = 500


class MigrationError(OverbrainerError):
    """The migration stopped, or its verification found a difference."""


@dataclass
class RunPlan:
    """One run: how many events this checkout has, how many the team store has."""

    run_id: str
    source_events: int
    target_events: int = 0
    conflict: str | None = None

    @property
    def to_copy(self) -> int:
        """Events still to copy (none for a run in conflict)."""
        return 0 if self.conflict else max(0, self.source_events - self.target_events)

    def to_json(self) -> dict[str, Any]:
        """As JSON primitives (``store migrate --json``)."""
        return {
            "run": self.run_id,
            "source_events": self.source_events,
            "target_events": self.target_events,
            "to_copy": self.to_copy,
            "conflict": self.conflict,
        }


@dataclass
class Plan:
    """What a migration would do, run by run (oldest run first)."""

    runs: list[RunPlan] = field(default_factory=list)

    @property
    def events(self) -> int:
        """Events in the source."""
        return sum(r.source_events for r in self.runs)

    @property
    def to_copy(self) -> int:
        """Events the migration copies."""
        return sum(r.to_copy for r in self.runs)

    @property
    def runs_to_copy(self) -> list[RunPlan]:
        """Runs with events to copy."""
        return [r for r in self.runs if r.to_copy]

    @property
    def conflicts(self) -> list[RunPlan]:
        """Runs the migration leaves alone because the team store's differ."""
        return [r for r in self.runs if r.conflict]


@dataclass
class _Seen:
    run_id: str = ""
    count: int = 0
    last_version: int = 0
    last: Any = None  # the source's last stored event of the run
    contiguous: bool = True


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _notes(store: RunStore) -> Iterator[Any]:
    """Every stored event of ``store`` in append order."""
    position = 0
    while True:
        batch = store.recorder.select_notifications(start=position + 1, limit=_READ)
        if not batch:
            return
        yield from batch
        position = batch[-1].id


def _stored(recorder: Any, oid: uuid.UUID, version: int) -> Any:
    found = recorder.select_events(oid, gt=version - 1, lte=version)
    return found[0] if found else None


def _last(recorder: Any, oid: uuid.UUID) -> Any:
    found = recorder.select_events(oid, desc=True, limit=1)
    return found[0] if found else None


def _same(a: Any, b: Any) -> bool:
    return bool(
        a is not None
        and b is not None
        and (a.originator_version, a.topic, bytes(a.state))
        == (b.originator_version, b.topic, bytes(b.state))
    )


def plan(source: RunStore, target: RunStore) -> tuple[Plan, dict[uuid.UUID, RunPlan]]:
    """What is in ``source`` and not yet in ``target``, per run (reads both, writes none)."""
    seen: dict[uuid.UUID, _Seen] = {}
    for note in _notes(source):
        oid = _uuid(note.originator_id)
        entry = seen.setdefault(oid, _Seen())
        entry.count += 1
        entry.contiguous &= note.originator_version == entry.last_version + 1
        entry.last_version = note.originator_version
        entry.last = note
        if not entry.run_id:
            entry.run_id = source.record_of(note).run_id
    by_oid: dict[uuid.UUID, RunPlan] = {}
    for oid, entry in seen.items():
        run = RunPlan(run_id=entry.run_id, source_events=entry.count)
        by_oid[oid] = run
        if not entry.contiguous:
            run.conflict = "this checkout's log has a gap in the run's events"
            continue
        there = _last(target.recorder, oid)
        run.target_events = there.originator_version if there is not None else 0
        if run.target_events > run.source_events:
            run.conflict = (
                f"the team store has {plural(run.target_events, 'event')} of it, this checkout "
                f"{run.source_events}: it went on elsewhere"
            )
        elif run.target_events == run.source_events:
            if not _same(there, entry.last):
                run.conflict = f"its event {run.target_events} differs in the team store"
        elif run.target_events and not _same(
            there, _stored(source.recorder, oid, run.target_events)
        ):
            run.conflict = f"its event {run.target_events} differs in the team store"
    return Plan(sorted(by_oid.values(), key=lambda r: r.run_id)), by_oid


Progress = Callable[[int, int], None]


def copy(
    source: RunStore,
    target: RunStore,
    by_oid: dict[uuid.UUID, RunPlan],
    progress: Progress | None = None,
) -> int:
    """Copy what the plan says is missing, in the source's order; returns events copied."""
    from eventsourcing.persistence import IntegrityError, StoredEvent

    total = sum(r.to_copy for r in by_oid.values())
    copied = 0
    batch: list[Any] = []

    def flush() -> None:
        nonlocal copied
        if not batch:
            return
        try:
            target.recorder.insert_events(batch)
        except IntegrityError:
            raise MigrationError(
                f"another process wrote to {target.where} while copying ({copied} of {total} "
                "events were copied); run the same `overbrainer store migrate` again: it "
                "copies only what is still missing"
            ) from None
        except Exception as error:
            reason = str(error) if isinstance(error, OverbrainerError) else repr(error)
            raise MigrationError(
                f"copying stopped after {copied} of {plural(total, 'event')}: {reason}; run "
                "the same `overbrainer store migrate` again: it copies only what is still missing"
            ) from None
        copied += len(batch)
        batch.clear()
        if progress is not None:
            progress(copied, total)

    for note in _notes(source):
        oid = _uuid(note.originator_id)
        run = by_oid.get(oid)
        if run is None or run.conflict or note.originator_version <= run.target_events:
            continue
        batch.append(
            StoredEvent(
                originator_id=oid,
                originator_version=note.originator_version,
                topic=note.topic,
                state=bytes(note.state),
            )
        )
        if len(batch) >= _BATCH:
            flush()
    flush()
    return copied


def verify(source: RunStore, target: RunStore, by_oid: dict[uuid.UUID, RunPlan]) -> list[str]:
    """Per run (conflicts aside): the team store holds as many events as this checkout,
    and the same last one. Returns what differs (nothing when all is well)."""
    problems: list[str] = []
    for oid, run in by_oid.items():
        if run.conflict:
            continue
        mine = _last(source.recorder, oid)
        theirs = _last(target.recorder, oid)
        count = theirs.originator_version if theirs is not None else 0
        if count != run.source_events:
            problems.append(
                f"run {run.run_id}: {plural(count, 'event')} there, {run.source_events} here"
            )
        elif not _same(mine, theirs):
            problems.append(f"run {run.run_id}: its last event differs")
    return problems
