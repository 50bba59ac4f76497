"""A new run on a Runpod target against the project's monthly budget
(``[project] monthly_budget_usd``): the run's bound from its settings and candidates, the
month's spend from the store, the verdict from :mod:`overbrainer.projections.budget`.

``train`` asks before the run is created (:meth:`PodTarget.before_create`): a run that
could pass the budget is refused with no run and no pod. Provisioning asks again once it
has chosen the candidates, before the first create (another checkout's run may have spent
in between): a refusal there fails the run with no pod. ``train --check`` shows the same
verdict as a check.
"""

from collections.abc import Iterable
from datetime import datetime

from overbrainer.config.model import RunpodTarget
from overbrainer.events.aggregate import RunLog
from overbrainer.preflight import checks
from overbrainer.preflight.checks import Check
from overbrainer.projections.budget import Budget, month_name, month_spend
from overbrainer.runpod.candidates import (
    Chosen,
    NoCandidate,
    Wanted,
    choose,
    run_cost_bound,
    wanted_of,
)
from overbrainer.runpod.models import GpuType
from overbrainer.session.session import Session

__all__ = ["budget_check_of", "budget_of", "month_budget"]


def budget_of(
    budget: float, wanted: Wanted, chosen: Chosen, states: Iterable[RunLog], now: datetime
) -> Budget:
    """A new run of ``wanted`` (its candidates ``chosen``) against a monthly ``budget`` as
    of ``now`` (the month is UTC's), the project's runs being ``states``."""
    bound = run_cost_bound(wanted, chosen)
    pods = 1 if wanted.max_cost_usd is not None else 1 + wanted.max_recoveries
    return Budget(budget, month_spend(states, now), bound, month_name(now), pods)


async def month_budget(
    session: Session,
    budget: float,
    wanted: Wanted,
    chosen: Chosen,
    now: datetime,
    *,
    run_id: str | None = None,
) -> Budget:
    """:func:`budget_of` with the project's runs as the store holds them now (a team
    store: every checkout's runs). ``run_id``: the run being provisioned, left out of the
    month's spend: its bound stands for all it may cost (a first pod of it cost nothing
    yet; the pod of a later attempt is within the same ``max_cost_usd``)."""
    states = [s for s in await session.journal.runs() if s.run.run_id != run_id]
    return budget_of(budget, wanted, chosen, states, now)


def budget_check_of(
    budget: float,
    name: str,
    spec: RunpodTarget,
    catalog: Iterable[GpuType] | None,
    states: Iterable[RunLog],
    now: datetime,
) -> Check:
    """The preflight's check of a new run on target ``name`` against the monthly budget:
    the month's spend, the budget and the run's bound; a problem when it could pass it."""
    wanted = wanted_of(name, spec, priced=True)
    try:
        chosen = choose(wanted, None if catalog is None else list(catalog))
    except NoCandidate:
        return checks.skipped("budget", "not checked: no GPU candidate to bound the run's cost")
    return checks.budget_check(budget_of(budget, wanted, chosen, states, now), name)
