"""Who follows a run, as its log says, and what a command that wants to follow it finds."""

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from overbrainer.events import types as ev
from overbrainer.events.claims import Claim, decide, follower, left_alone
from overbrainer.events.recorded import Recorded

ME = {"command": "supervise", "host": "h1", "pid": 10}
TRAIN = {"command": "train", "host": "h1", "pid": 20}
ATTACH = {"command": "train attach", "host": "h1", "pid": 30}
AWAY = {"command": "supervise", "host": "h2", "pid": 10}


@pytest.mark.parametrize(
    ("current", "alive", "found", "takes"),
    [
        (None, None, Claim.free, True),  # never followed, or detached
        (ME, False, Claim.mine, True),  # this process follows it already
        ({**ME, "command": "train attach"}, False, Claim.mine, True),
        (TRAIN, True, Claim.held, False),  # a live `train` still follows it
        (ATTACH, True, Claim.held, False),
        (TRAIN, False, Claim.stale, True),  # its follower is gone: taken over
        (AWAY, None, Claim.elsewhere, False),  # same pid, another host: not this process
        ({**TRAIN, "host": "h2"}, None, Claim.elsewhere, False),
    ],
)
def test_what_a_command_finds_in_a_run_it_wants_to_follow(
    current: dict[str, Any] | None, alive: bool | None, found: Claim, takes: bool
) -> None:
    verdict = decide(current, ME, alive)
    assert verdict is found
    assert verdict.takes is takes


def _log(*events: tuple[ev.Event, dict[str, Any]]) -> list[Recorded]:
    return [
        Recorded("r", seq, "2026-01-01T00:00:00Z", actor, event)
        for seq, (event, actor) in enumerate(events, 1)
    ]


CREATED = ev.RunCreated(
    run_id="r", target="here", kind="local", remote_dir="x", settings_digest="d"
)
STARTED = ev.JobStarted(job_dir="runs/r", pid=5)


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([], None),
        # A run being created is its starter's to settle (lifecycle/recover.py), not claimed.
        (_log((CREATED, TRAIN)), None),
        (_log((CREATED, TRAIN), (STARTED, TRAIN)), TRAIN),
        (_log((CREATED, TRAIN), (STARTED, TRAIN), (ev.Detached(), TRAIN)), None),
        (
            _log((CREATED, TRAIN), (STARTED, TRAIN), (ev.Detached(), TRAIN), (ev.Followed(), ME)),
            ME,
        ),
        # Another command's events (a checkpoint home, a cancel asked) claim nothing.
        (
            _log(
                (CREATED, TRAIN),
                (STARTED, TRAIN),
                (ev.Followed(), ATTACH),
                (ev.CancelRequested(relay="asked"), ME),
            ),
            ATTACH,
        ),
    ],
)
def test_the_follower_is_the_latest_claim_not_released(
    records: list[Recorded], expected: dict[str, Any] | None
) -> None:
    assert follower(records) == expected


def test_a_run_left_alone_names_its_follower_and_what_takes_it_over() -> None:
    said = left_alone("r1", Claim.held, ATTACH)
    assert said.startswith("run r1 is followed by `overbrainer train attach` (pid 30 on host h1)")
    assert "`overbrainer supervise` takes it over" in said
    away = left_alone("r1", Claim.elsewhere, AWAY)
    assert "(pid 10 on host h2)" in away and "follow it from that host" in away


def test_of_two_claims_from_one_read_of_the_log_the_store_keeps_one(tmp_path: Path) -> None:
    from functools import partial

    from overbrainer.events import decisions
    from overbrainer.events.actor import Actor
    from overbrainer.events.aggregate import InvalidTransition
    from overbrainer.events.store import RunStore

    run = "20260102-000000-abcd"
    here = Actor.here("supervise")
    first = RunStore(None, tmp_path, dataclasses.replace(here, pid=1001))
    second = RunStore(None, tmp_path, dataclasses.replace(here, pid=1002))
    try:
        first.create(
            ev.RunCreated(
                run_id=run, target="here", kind="local", remote_dir="runs/x", settings_digest="d"
            )
        )
        first.append(run, lambda _: [ev.JobStarted(job_dir="runs/x", pid=1)])
        first.append(run, lambda _: [ev.Detached()])
        # Both read the log at once: nobody follows the run.
        read = [first.history(run), second.history(run)]
        assert [follower(records) for records in read] == [None, None]
        first.append(run, partial(decisions.follow, seen=len(read[0])))
        with pytest.raises(InvalidTransition, match="changed while its follower was read"):
            second.append(run, partial(decisions.follow, seen=len(read[1])))
        # The loser reads again and finds the winner.
        winner = follower(second.history(run))
        assert winner is not None and winner["pid"] == 1001
        assert decide(winner, {**here.to_json(), "pid": 1002}, True) is Claim.held
    finally:
        first.close()
        second.close()
