"""The facts of each kind of target, one row per kind; every kind the settings accept and
every kind an old log recorded has its row."""

from typing import get_args

import pytest

from overbrainer.config.model import Target
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog, fold
from overbrainer.events.target_kinds import UNKNOWN_KIND, KindFacts, TargetKind, facts_of
from tests.events.scripted import SCRIPT_0_3

AT = "2026-01-01T00:00:00.000000Z"


@pytest.mark.parametrize(
    ("recorded", "facts"),
    [
        ("local", KindFacts(runs_here=True, rents_pod=False)),
        ("ssh", KindFacts(runs_here=False, rents_pod=False)),
        ("runpod", KindFacts(runs_here=False, rents_pod=True)),
        # A kind of a newer version: nothing is looked for here or on a pod.
        ("cluster", KindFacts(runs_here=False, rents_pod=False)),
    ],
)
def test_a_recorded_kind_tells_where_the_job_runs_and_whether_it_has_a_pod(
    recorded: str, facts: KindFacts
) -> None:
    assert facts_of(recorded) == facts


def test_an_unknown_kind_is_none_of_the_known_ones() -> None:
    assert facts_of("cluster") is UNKNOWN_KIND
    assert facts_of("") is UNKNOWN_KIND


def test_the_kinds_are_those_the_settings_accept() -> None:
    accepted = {
        kind
        for model in get_args(Target)
        for kind in get_args(model.model_fields["kind"].annotation)
    }
    assert accepted == {kind.value for kind in TargetKind}


def test_every_kind_an_old_log_recorded_is_known() -> None:
    recorded = {event.kind for _, event in SCRIPT_0_3 if isinstance(event, ev.RunCreated)}
    assert recorded == {"local", "runpod"}
    assert all(facts_of(kind) is TargetKind(kind).facts for kind in recorded)


def test_a_run_reads_its_facts_from_its_kind_folded_and_read_back() -> None:
    created = ev.RunCreated(
        run_id="20260101-000000-ab12",
        target="gpu",
        kind="runpod",
        remote_dir="x",
        settings_digest="d",
    )
    state = fold([(created, AT)])
    assert state.run.kind_facts.rents_pod
    assert not state.run.kind_facts.runs_here
    assert RunLog.from_json(state.to_json()).run.kind_facts == state.run.kind_facts
