"""The campaign runner: a case whose harness timed out runs once more, alone; only a second
time-out counts as a violation, and any other failure counts at once."""

from pathlib import Path

from reliability import core
from reliability.core import Case, run_cases
from reliability.world import case_dir


def test_a_harness_time_out_runs_again_alone_and_only_a_second_one_counts() -> None:
    tries: dict[str, int] = {}

    def flaky() -> list[str]:
        tries["flaky"] = tries.get("flaky", 0) + 1
        if tries["flaky"] == 1:
            raise TimeoutError("a running run did not happen in 90 s")
        return []

    def hung() -> list[str]:
        tries["hung"] = tries.get("hung", 0) + 1
        raise TimeoutError("a running run did not happen in 90 s")

    def broken() -> list[str]:
        tries["broken"] = tries.get("broken", 0) + 1
        return ["pod k3x9 bills and nothing guards it"]

    core.RERUN.clear()
    cases = [
        Case("ctrl-c", name, fn)
        for name, fn in (("flaky", flaky), ("hung", hung), ("broken", broken))
    ]
    results = {r.name: r for r in run_cases(cases, jobs=2)}
    assert tries == {"flaky": 2, "hung": 2, "broken": 1}
    assert results["flaky"].violations == []
    assert [v.split(":")[:2] for v in results["hung"].violations] == [["harness", " TimeoutError"]]
    assert results["broken"].violations == ["pod k3x9 bills and nothing guards it"]
    assert sorted(core.RERUN) == ["flaky", "hung"]
    core.RERUN.clear()


def test_a_case_run_again_gets_a_fresh_directory_beside_the_first(tmp_path: Path) -> None:
    first = case_dir(tmp_path, "local-train-sigint-05")
    first.mkdir(parents=True)
    (first / "left").write_text("as it was")
    second = case_dir(tmp_path, "local-train-sigint-05")
    assert second == tmp_path / "cases" / "local-train-sigint-05-try2"
    assert not second.exists() and (first / "left").read_text() == "as it was"
