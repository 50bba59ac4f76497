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

from overbrainer.events.aggregate import RunLog
from overbrainer.projections.budget import Budget, month_name, month_spend
from overbrainer.runpod.candidates import Chosen, Wanted, run_cost_bound
from overbrainer.session.session import Session

__all__ = ["budget_of", "month_budget"]


def budget_of(
    budget: float, wanted: Wanted, chosen: Chosen, states: Iterable[RunLog], now: datetime
) -> Budget:
    """A new run of ``wanted`` (its candidates ``chosen``) against a monthly ``budget`` as
    of ``now`` (the month is UTC's), the project's runs being ``states``."""
    bound = run_cost_bound(wanted, chosen)
    return Budget(budget, month_spend(states, now), bound, month_name(now))


async def month_budget(
    session: Session, budget: float, wanted: Wanted, chosen: Chosen, now: datetime
) -> Budget:
    """:func:`budget_of` with the project's runs as the store holds them now (a team
    store: every checkout's runs)."""
    return budget_of(budget, wanted, chosen, await session.journal.runs(), now)
