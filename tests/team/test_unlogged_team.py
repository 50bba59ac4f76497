"""A team store that holds none of the runs whose directories this checkout keeps in runs/
(a [store] url changed to a new database, say) is not shown as "no runs yet"."""

import subprocess
import sys
from pathlib import Path

from tests.fakes.pg import Team

RUN = "20260101-000000-5a0e"


def test_an_empty_team_store_with_runs_here_says_where_they_are_not(
    team: Team, tmp_path: Path
) -> None:
    checkout = team.checkout(tmp_path / "checkout")
    (checkout / "runs" / RUN).mkdir(parents=True)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "overbrainer", "-C", str(checkout), *args],
            env=team.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    listed = run("runs", "ls")
    assert listed.returncode == 1 and "no runs yet" not in listed.stderr, listed.stderr
    assert "error: the event store " in listed.stderr
    assert (
        f"holds no runs, yet runs/ holds 1 run directory ({RUN}): the log was emptied or "
        "replaced since they were made; restore "
    ) in listed.stderr
    assert "point [store] url (overbrainer.toml or OVERBRAINER_STORE__URL)" in listed.stderr
    assert "password" not in listed.stderr.lower()
    shown = run("events", RUN)
    assert shown.returncode == 1
    assert f"no run {RUN} in " in shown.stderr and "the log holds no runs" in shown.stderr
