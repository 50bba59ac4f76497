"""Train the tiny model with the real Axolotl through the real ``overbrainer``, on each
kind of target: the run succeeds, its results are home and verified, the real plugin's
losses are recorded, each evaluation is shown once at its own step, and Axolotl trains on
the assistant's reasoning and answer only.

On ``local`` every command runs with no network at all (``unshare -n``): a job on an
offline machine ends when training ends. ``ctrl-c-attach``: a SIGINT to ``train`` once
the job has started leaves the job training; ``train attach``, once it has ended, starts
with where the run stands, shows every evaluation it missed and brings the results home.
"""

from pathlib import Path

from e2e.harness import CASES, World, check_run, train_interrupted, train_through


def test_train(world: World, case_name: str, tmp_path: Path) -> None:
    case = CASES[case_name]
    project = world.project(case, tmp_path)
    if case.interrupt:
        run_id, stderr = train_interrupted(project)
    else:
        run_id, stderr = train_through(project)
    check_run(project, run_id, stderr)
