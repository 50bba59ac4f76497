"""The checkpoints of a command are derived from its code as it runs, not listed by hand:
adding an await or an append adds a checkpoint, and the campaigns act there."""

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
import trio

from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.events.types import JobStarted, RunCreated
from overbrainer.front import fault_injection
from overbrainer.front.fault_injection import Plan, enumerate_checkpoints
from overbrainer.session.journal import Journal
from overbrainer.testing.stand_in import AXOLOTL

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path, body: str) -> ModuleType:
    """Write ``body`` as the module at ``path`` and import it afresh."""
    path.write_text(textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location(f"mod_{path.stem}_{len(body)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BEFORE = """
    import trio

    async def step():
        await trio.sleep(0)

    async def work():
        await step()
"""

AFTER = """
    import trio

    async def step():
        await trio.sleep(0)

    async def work():
        await step()
        await trio.sleep(0)  # the new await
"""


def test_a_new_await_adds_a_checkpoint_by_itself(tmp_path: Path) -> None:
    code = tmp_path / "pkg"
    code.mkdir()
    before = enumerate_checkpoints(_load(code / "flow.py", BEFORE).work, [code])
    after = enumerate_checkpoints(_load(code / "flow.py", AFTER).work, [code])
    assert len(before) == 1
    assert before[0] == "await pkg/flow.py:work:8 > pkg/flow.py:step:5"
    assert len(after) == len(before) + 1
    new = [key for key in after if key not in before]
    assert new == ["await pkg/flow.py:work:9"]


def test_a_new_append_adds_two_checkpoints_by_itself(tmp_path: Path) -> None:
    store = RunStore(None, tmp_path, Actor.here("test"))
    journal = Journal(store, tmp_path)
    created = RunCreated(
        run_id="20260101-000000-abcd",
        target="local",
        kind="local",
        remote_dir="runs/20260101-000000-abcd",
        settings_digest="d",
    )

    async def create() -> None:
        await journal.create(created)

    async def create_and_start() -> None:
        await journal.create(RunCreated(**{**created.fields(), "run_id": "20260101-000000-abce"}))
        await journal.append("20260101-000000-abce", [JobStarted(job_dir="runs/x", pid=42)])

    try:
        before = enumerate_checkpoints(create, [ROOT / "overbrainer"])
        after = enumerate_checkpoints(create_and_start, [ROOT / "overbrainer"])
    finally:
        store.close()
    appends = [key for key in after if key.startswith("append-")]
    assert appends == [
        "append-before run.Created",
        "append-after run.Created",
        "append-before run.JobStarted",
        "append-after run.JobStarted",
    ]
    assert set(before) < set(after)
    # The await of the new append is a checkpoint too, keyed by where it is in the code.
    assert any("Journal.append" in key for key in set(after) - set(before))


def test_off_by_default_no_instrument_and_appends_untouched() -> None:
    assert fault_injection.PLAN is None

    async def main() -> None:
        remove = fault_injection.install()
        remove()

    trio.run(main)


def test_a_malformed_plan_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="OVERBRAINER_FAULT_PLAN is not a valid checkpoint"):
        Plan.parse('{"action": "explode"}')
    plan = Plan.parse('{"at": "append-before run.Ended", "action": "kill", "nth": 2}')
    assert (plan.at, plan.action, plan.nth) == ("append-before run.Ended", "kill", 2)


def test_the_real_train_command_is_traced_end_to_end(tmp_path: Path) -> None:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "axolotl").symlink_to(AXOLOTL)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "OVERBRAINER_TARGETS__LOCAL__VENV": str(venv.parent),
        "FAKE_AXOLOTL_STEP_SECONDS": "0.01",
    }
    project = tmp_path / "project"
    ob = [sys.executable, "-m", "overbrainer"]
    subprocess.run([*ob, "init", str(project)], env=env, check=True, capture_output=True)
    trace = tmp_path / "trace.jsonl"
    plan = json.dumps({"trace": str(trace)})
    done = subprocess.run(
        [*ob, "-C", str(project), "train"],
        env={**env, "OVERBRAINER_FAULT_PLAN": plan},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    keys = [json.loads(line)["key"] for line in trace.read_text().splitlines()]
    for append in ("run.Created", "run.JobStarted", "run.ArtifactsRetrieved", "run.Ended"):
        assert f"append-before {append}" in keys and f"append-after {append}" in keys
    # The follow loop's awaits are there, keyed from the command down.
    assert any(
        k.startswith("await overbrainer/cli/train_cmd.py:train:") and "watch" in k for k in keys
    )
    # The job does not inherit the plan (its environment drops OVERBRAINER_*).
    assert (
        "OVERBRAINER_FAULT_PLAN"
        not in (project / "runs")
        .joinpath(sorted(p.name for p in (project / "runs").iterdir())[0], "job.cmds")
        .read_text()
    )


def test_the_await_of_a_journal_append_is_known_as_one(tmp_path: Path) -> None:
    # The campaigns give an append's await no Ctrl-C case of its own (the append's own
    # checkpoints stand for it); they must recognise it through the journal's runner.
    from reliability.plan import is_append_await

    store = RunStore(None, tmp_path, Actor.here("test"))
    journal = Journal(store, tmp_path)
    run_id = "20260101-000000-abcd"

    async def work() -> None:
        await journal.create(
            RunCreated(run_id=run_id, target="l", kind="local", remote_dir="r", settings_digest="d")
        )
        await journal.append(run_id, [JobStarted(job_dir="r", pid=42)])
        await journal.state(run_id)

    try:
        keys = enumerate_checkpoints(work, [ROOT / "overbrainer"])
    finally:
        store.close()
    awaits = [key for key in keys if key.startswith("await ")]
    assert [is_append_await(key) for key in awaits] == [False, True, False]
    assert ":Journal.append:" in awaits[1]
    assert not any(is_append_await(key) for key in keys if key.startswith("append-"))
