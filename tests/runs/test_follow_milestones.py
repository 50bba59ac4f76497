"""Following a job: every evaluation shown once at the step it was computed at (however
the lines arrive), each phase, then the retrieval — on trio's MockClock with an in-memory
target."""

import io
import json
from pathlib import Path

import trio
import trio.testing

from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.events.types import RunCreated
from overbrainer.front.console import Front
from overbrainer.front.interrupts import Interrupts
from overbrainer.lifecycle import service
from overbrainer.session.journal import Journal
from overbrainer.session.session import Session
from overbrainer.testing.fake_executor import FakeExecutor, FakeMachine, run_inline

RUN = "20260101-000000-abcd"
DIR = f"runs/{RUN}"


def _line(**fields: object) -> bytes:
    return (json.dumps(fields) + "\n").encode()


def _log(step: int, **values: float) -> bytes:
    return _line(event="log", time=float(step), step=step, epoch=step / 8, max_steps=8, **values)


async def test_each_eval_once_at_its_step_then_phases_then_retrieval(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    machine = FakeMachine()
    # Poll 1 sees nothing; poll 2 sees two evaluations and the steps around them at once
    # (the old follower showed only the last, with the newest training step); then the
    # end of training, the merge, and the job's end.
    chunks = [
        _line(event="begin", time=0.0, max_steps=8)
        + _log(0, eval_loss=2.0)
        + _log(1, loss=3.0)
        + _log(2, loss=2.9)
        + _log(2, eval_loss=1.9)
        + _log(3, loss=2.8),
        _log(4, loss=2.7) + _log(4, eval_loss=1.8) + _log(8, loss=2.5) + _log(8, eval_loss=1.7),
        _line(event="phase", time=9.0, phase="saving_adapter"),
        _line(event="phase", time=10.0, phase="merging"),
    ]
    text = b""
    for at, chunk in enumerate(chunks, start=1):
        text += chunk
        machine.write_at(at * 1.5, f"{DIR}/metrics.jsonl", text)
    machine.files[f"{DIR}/job.pid"] = b"4242\n"
    machine.files[f"{DIR}/output/adapter_model.safetensors"] = b"weights"
    machine.write_at(7.0, f"{DIR}/exit_code", b"0\n")

    err = io.StringIO()
    front = Front(io.StringIO(), err, terminal=False, throttle=3600.0)
    store = RunStore(None, tmp_path, Actor.here("test"))
    try:
        journal = Journal(store, tmp_path, listener=front.event, runner=run_inline)
        session = Session(journal, front, Interrupts(front.notice), tmp_path)
        await journal.create(
            RunCreated(run_id=RUN, target="box", kind="ssh", remote_dir=DIR, settings_digest="d")
        )
        job = service.Job(RUN, FakeExecutor(machine, "box"), DIR)
        followed = await service.watch(session, job)
        assert followed.state.exit_code == 0
        await service.collect(session, job)
    finally:
        store.close()

    lines = [line for line in err.getvalue().splitlines() if not line.startswith("progress:")]
    assert [line for line in lines if not line.startswith("run.")] == [
        "eval_loss 2.000 at step 0 (epoch 0)",
        "eval_loss 1.900 at step 2 (epoch 0.25)",
        "eval_loss 1.800 at step 4 (epoch 0.5)",
        "eval_loss 1.700 at step 8 (epoch 1)",
        "training ended; saving the adapter",
        "merging the adapter into the base model",
        "retrieving the results of run 20260101-000000-abcd from host box",
    ]
    assert followed.summary.eval_loss == 1.7
