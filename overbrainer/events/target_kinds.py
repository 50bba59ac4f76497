"""What each kind of target means, said once: the kinds a run records in ``run.Created``
(``[targets.NAME] kind`` of the settings it was created with) and the facts of each.

Code below the targets asks a run's kind for a fact by name (``runs_here``,
``rents_pod``) instead of comparing its name: a new kind is a new row of the table.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


@dataclass(frozen=True)
class KindFacts:
    """What a kind of target says of where a run's job runs."""

    runs_here: bool
    """The job runs on this machine, in the run's own directory: its process, its markers
    and its metrics file are there to read."""
    rents_pod: bool
    """A pod is created for the run (and deleted after it): the run has a pod side,
    written to ``pod.json``."""


class TargetKind(StrEnum):
    """A kind of target, by the name the settings give it and a run's log records."""

    local = "local"
    ssh = "ssh"
    runpod = "runpod"

    @property
    def facts(self) -> KindFacts:
        return _FACTS[self]


_FACTS: Mapping[TargetKind, KindFacts] = MappingProxyType(
    {
        TargetKind.local: KindFacts(runs_here=True, rents_pod=False),
        TargetKind.ssh: KindFacts(runs_here=False, rents_pod=False),
        TargetKind.runpod: KindFacts(runs_here=False, rents_pod=True),
    }
)

UNKNOWN_KIND = KindFacts(runs_here=False, rents_pod=False)
"""The facts of a kind this version does not know (a newer one recorded it): nothing is
assumed, so nothing is looked for here or on a pod."""


def facts_of(recorded: str) -> KindFacts:
    """The facts of the kind ``recorded`` in a run's log."""
    try:
        return TargetKind(recorded).facts
    except ValueError:
        return UNKNOWN_KIND
