"""Runs side by side: what each came to and the settings that differ, from their facts."""

from overbrainer.events import types as ev
from overbrainer.events.aggregate import fold
from overbrainer.events.store import Recorded
from overbrainer.projections.compare import RunFacts, differing, flatten, side_by_side
from overbrainer.projections.curves import Curves


def _facts(run_id: str, settings: dict[str, str], loss: tuple[float, ...]) -> RunFacts:
    events = [
        (
            ev.RunCreated(
                run_id=run_id,
                target="gpu",
                kind="runpod",
                remote_dir="r",
                settings_digest="d",
                base_model="m",
                adapter="lora",
            ),
            "2026-01-01T10:00:00Z",
        ),
        (ev.JobStarted(job_dir="r", pid=5), "2026-01-01T10:02:00Z"),
        (ev.RunEnded(state="succeeded"), "2026-01-01T10:32:30Z"),
        (ev.PodDeleted(pod_id="p", by="client", spend=0.25), "2026-01-01T10:33:00Z"),
    ]
    state = fold([(e, at) for e, at in events if not isinstance(e, ev.PodDeleted)])
    state.pod.pod_id, state.pod.spend = "p", 0.25
    records = tuple(
        Recorded(run_id=run_id, seq=i + 1, at=at, actor={}, event=e)
        for i, (e, at) in enumerate(events)
    )
    points = tuple((float(i + 1), value) for i, value in enumerate(loss))
    return RunFacts(state, records, Curves(points, ((2.0, 1.5),)), settings)


def test_nested_settings_are_flattened_to_dotted_keys() -> None:
    assert flatten({"a": 1, "b": {"c": [1, 2]}, "d": [{"e": "x"}], "f": None}) == {
        "a": "1",
        "b.c": "[1, 2]",
        "d.0.e": '"x"',
        "f": "null",
    }


def test_only_settings_that_differ_are_shown_with_a_dash_where_one_is_missing() -> None:
    a = _facts("20260101-100000-aaaa", {"lr": "0.0002", "r": "16", "x": '"same"'}, (2.0, 1.0))
    b = _facts("20260101-100000-bbbb", {"lr": "2e-05", "r": "16", "x": '"same"'}, (2.0, 1.5))
    c = _facts("20260101-100000-cccc", {"lr": "0.0002", "x": '"same"'}, (3.0, 0.5, 0.75))
    assert differing([a, b, c]) == [("lr", ["0.0002", "2e-05", "0.0002"]), ("r", ["16", "16", "-"])]
    text = side_by_side([a, b, c])
    assert text[0].split() == [run.run_id for run in (a, b, c)]
    assert "training" in text[5] and text[5].split()[1:] == ["30m30s"] * 3
    assert text[6].split()[2:] == ["32m30s"] * 3  # "in all": created to ended
    assert text[7].split()[1:] == ["~$0.25"] * 3  # overbrainer's estimate: Runpod's bill unread
    assert " ".join(text[9].split()[2:]) == "1.000 (step 2) 1.500 (step 2) 0.5000 (step 2)"
    assert text[-3] == "settings that differ:"
    assert text[-2].split() == ["lr", "0.0002", "2e-05", "0.0002"]
    assert text[-1].split() == ["r", "16", "16", "-"]
    same = side_by_side([a, a])
    assert same[-1] == "settings: the same in every run"
