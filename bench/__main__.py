"""Run the benchmarks and print one table: each figure beside the floor it is compared with.

``python -m bench [--quick] [cli] [reads] [completion] [pod] [cache] [ssh] [team] [train]``
(default: every group). ``--quick`` measures every group at small sizes in a minute or two:
the figures mean little, but each path runs whole, so CI notices a benchmark that no longer
works.
"""

import sys
import time
from collections.abc import Callable

from bench import (
    cli_speed,
    completion_speed,
    model_cache,
    pod_cost,
    read_speed,
    ssh_speed,
    team_speed,
    train_overhead,
)

Row = tuple[str, str, str, str]
GROUPS: dict[str, Callable[..., list[Row]]] = {
    "cli": cli_speed.run,
    "reads": read_speed.run,
    "completion": completion_speed.run,
    "pod": pod_cost.run,
    "cache": model_cache.run,
    "ssh": ssh_speed.run,
    "team": team_speed.run,
    "train": train_overhead.run,
}
HEAD: Row = ("what", "figure", "floor", "aim")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def table(rows: list[Row]) -> str:
    """``rows`` as a Markdown table under :data:`HEAD`."""
    width = [max(len(row[i]) for row in [*rows, HEAD]) for i in range(len(HEAD))]

    def line(row: Row) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, width, strict=True)) + " |"

    return "\n".join(
        [line(HEAD), "|" + "|".join("-" * (w + 2) for w in width) + "|"]
        + [line(row) for row in rows]
    )


def main(argv: list[str]) -> int:
    """Run the groups named in ``argv`` (default: all), at small sizes with ``--quick``."""
    quick = "--quick" in argv
    names = [arg for arg in argv if arg != "--quick"]
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        print(
            f"error: no benchmark group {', '.join(map(repr, unknown))}; the groups are "
            f"{', '.join(GROUPS)} (for example `python -m bench --quick cli pod`)",
            file=sys.stderr,
        )
        return 2
    rows: list[Row] = []
    for name in names or list(GROUPS):
        started = time.perf_counter()
        rows += GROUPS[name](_say, quick=quick)
        _say(f"{name}: done in {time.perf_counter() - started:.0f} s")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
