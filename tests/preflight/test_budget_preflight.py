"""``train --check`` and ``train`` under ``[project] monthly_budget_usd``, through the real
``overbrainer`` command and the fake Runpod API on loopback: the budget line, and a run that
could pass the budget refused as a problem, before any run or pod exists."""

from datetime import UTC, datetime
from pathlib import Path

from overbrainer.projections.budget import month_name
from tests.preflight.test_train_preflight import run, runpod_project
from tests.runs.conftest import Project, project

__all__ = ["project"]

# The project's target: gpu_types = ["NVIDIA A40"] at $0.40/h, max_hours = 1.


def _months() -> str:
    return month_name(datetime.now(UTC))


def _budget_line(stdout: str) -> str:
    (line,) = [x for x in stdout.splitlines() if " budget " in x]
    return line


async def test_check_shows_the_months_spend_against_the_budget_and_the_runs_bound(
    tmp_path: Path,
) -> None:
    async with runpod_project(tmp_path, ["NVIDIA A40"]) as (fake, project):
        before = _months()
        done = await run(project, "train", "--check", OVERBRAINER_PROJECT__MONTHLY_BUDGET_USD="2")
        after = _months()
    assert done.returncode == 0, done.stderr
    line = _budget_line(done.stdout)
    assert line.split()[0] == "ok"
    # The month the command ran in (UTC): the one before or after it, at a month's turn.
    assert any(
        line.endswith(
            f"budget          $0.00 of $2.00 spent this month ({month}); this run may "
            "cost up to $1.60 (4 pods: its first and one per recovery, max_recoveries)"
        )
        for month in {before, after}
    ), line
    assert fake.create_requests() == [] and project.runs() == []


async def test_a_run_that_could_pass_the_budget_is_a_problem_and_creates_nothing(
    tmp_path: Path,
) -> None:
    budget = {"OVERBRAINER_PROJECT__MONTHLY_BUDGET_USD": "0.3"}
    async with runpod_project(tmp_path, ["NVIDIA A40"]) as (fake, project):
        checked = await run(project, "train", "--check", **budget)
        trained = await run(project, "train", **budget)
    assert checked.returncode != 0
    assert _budget_line(checked.stdout).split()[0] == "PROBLEM"
    refusal = (
        "project.monthly_budget_usd $0.30; this run may cost up to $1.60 (4 pods: its first "
        "and one per recovery, max_recoveries), which would pass it: lower "
        "targets.gpu.max_cost_usd to 0.3 (what is left) or raise project.monthly_budget_usd"
    )
    assert refusal in checked.stdout + checked.stderr
    assert trained.returncode != 0
    assert refusal in trained.stdout + trained.stderr
    assert fake.create_requests() == [] and project.runs() == []


def test_a_local_target_costs_nothing_against_the_budget(project: Project) -> None:
    done = project.run("train", "--check", OVERBRAINER_PROJECT__MONTHLY_BUDGET_USD="0.01")
    assert done.returncode == 0, done.stderr
    assert " budget " not in done.stdout
