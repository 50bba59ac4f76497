"""``train`` on a Runpod target under ``[project] monthly_budget_usd``, on trio's MockClock
with the fake Runpod API in-process: a run whose bound and the month's spend would pass the
budget is refused before the run is created, and no pod is asked for."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.cli import runs_read
from overbrainer.cli.main import main
from overbrainer.config.model import ProjectSettings
from overbrainer.events.ids import new_run_id
from overbrainer.projections.budget import month_bounds, month_name
from overbrainer.projections.spend import run_spend
from overbrainer.targets.runpod.provision import OverBudget, provision
from overbrainer.testing.pod_training import Train, training
from overbrainer.utc import parse_utc

# The A40 lists at $0.40/h: a run of max_hours = 2 may cost up to $0.80 (no max_cost_usd,
# no recovery: one pod).
BUDGET = 0.82


def _budgeted(t: Train, budget: float = BUDGET) -> None:
    t.settings = t.settings.model_copy(
        update={"project": ProjectSettings(monthly_budget_usd=budget)}
    )
    t.spec = t.spec.model_copy(update={"max_recoveries": 0})


async def _first_run(t: Train) -> str:
    """A first run that fits, trained to its end; the month's clock pinned to its creation,
    so that the test holds on any date (a run created at the month's last second too)."""
    assert await t.train() == 0
    run_id = t.run_id()
    created = parse_utc(t.rig.state(run_id).run.created_at)
    assert created is not None
    t.rig.context.clock = lambda: created
    return run_id


async def test_a_run_that_could_pass_the_budget_is_refused_before_it_or_its_pod_exists(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _budgeted(t)
        first = await _first_run(t)
        spent = t.rig.state(first).pod.spend
        # Spent enough that a second $0.80 run would pass the budget.
        assert spent is not None and BUDGET - 0.80 < spent < BUDGET
        with pytest.raises(OverBudget) as refused:
            await t.train()
        message = str(refused.value)
        month = month_name(t.rig.context.clock())
        assert f"this month's spend ({month}) is ${spent:.2f}" in message
        assert "project.monthly_budget_usd $0.82" in message
        assert "this run may cost up to $0.80" in message
        left = int(round((BUDGET - spent) * 100, 6)) / 100
        assert f"lower targets.gpu.max_cost_usd to {left:g} (what is left)" in message
        assert message.endswith("no run was created")
        # One create only (the first run's), and no second run in the log.
        assert len(t.rig.creates()) == 1
        assert t.run_id() == first


async def test_a_run_whose_cap_fits_in_what_is_left_goes_on(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _budgeted(t)
        first = await _first_run(t)
        # What the refusal says to do: a cap within what the month has left.
        t.spec = t.spec.model_copy(update={"max_cost_usd": 0.5})
        assert await t.train() == 0
        assert t.run_id() != first
        assert len(t.rig.creates()) == 2


async def test_a_run_exactly_at_the_budget_is_allowed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _budgeted(t, 0.80)
        assert await t.train() == 0
        assert len(t.rig.creates()) == 1


async def test_the_walk_asks_again_and_creates_no_pod_for_a_run_past_the_budget(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _budgeted(t)
        await _first_run(t)
        # A run created past `train`'s look (as another checkout's spend would make it):
        # the walk, candidates chosen, refuses before any create.
        command = t.command()
        run_id = new_run_id()
        await command.session.journal.create(command.target().created(run_id))
        with pytest.raises(
            OverBudget, match=r"this run may cost up to \$0\.80.*no pod was created"
        ):
            await provision(command.ctx, run_id, t.spec, keep=False, monthly_budget=BUDGET)
        assert len(t.rig.creates()) == 1


def _ls(capsys: pytest.CaptureFixture[str], project: Path, *args: str) -> str:
    assert main(["-C", str(project), "runs", "ls", *args]) == 0
    return capsys.readouterr().out


async def test_runs_ls_since_shows_the_month_against_the_budget(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with training(tmp_path) as t:
        first = await _first_run(t)
        state = t.rig.state(first)
    created = parse_utc(state.run.created_at)
    assert created is not None
    spent = run_spend(state, created).total
    assert spent > 0
    # Without a budget, the totals line is as it was.
    monkeypatch.setattr(runs_read, "clock", lambda: created)
    assert "budget" not in _ls(capsys, tmp_path, "--since", "7d")
    with (tmp_path / "overbrainer.toml").open("a") as toml:
        toml.write("\n[project]\nmonthly_budget_usd = 10\n")
    last = _ls(capsys, tmp_path, "--since", "7d").splitlines()[-1]
    assert last.startswith(f"total ${spent:.2f} for 1 run created in the last 7d")
    assert last.endswith(
        f"; this month ({month_name(created)}) ${spent:.2f} of the monthly budget $10.00, "
        f"${10 - spent:.2f} left"
    )
    # The next month (UTC): the run is still within the span listed, not in the month.
    _, next_month = month_bounds(created)
    monkeypatch.setattr(runs_read, "clock", lambda: next_month)
    last = _ls(capsys, tmp_path, "--since", "60d").splitlines()[-1]
    assert last.endswith(
        f"; this month ({month_name(next_month)}) $0.00 of the monthly budget $10.00, $10.00 left"
    )
