"""Two checkouts sharing one PostgreSQL store: what one appends, the other sees, follows and
shows; a stopped server fails plainly and nothing is half-written; concurrent appends from
two checkouts lose nothing."""

import itertools
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from overbrainer.cli.main import main
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import RunLog
from overbrainer.events.errors import StoreError
from overbrainer.events.store import RunStore
from tests.fakes.pg import Team

RUN = "20260301-101500-a1b2"
ROOT = Path(__file__).resolve().parents[2]
LAPTOP = Actor(command="train", user="alice", host="laptop-a", pid=4242, version="0.3.0")


def _created(kind: str = "runpod") -> ev.RunCreated:
    return ev.RunCreated(
        run_id=RUN,
        target="gpu",
        kind=kind,
        remote_dir=f"overbrainer/{RUN}",
        settings_digest="d1",
        base_model="Qwen/Qwen3-0.6B",
        adapter="lora",
    )


def _pod_events() -> list[ev.Event]:
    return [
        ev.KeysGenerated(host_public_key="ssh-ed25519 AAAAhost"),
        ev.AttemptSent(
            n=1,
            pod_name=f"overbrainer-{RUN}-1",
            gpu_type="NVIDIA A40",
            deadline="2026-03-01T16:00:00Z",
        ),
        ev.AttemptResolved(n=1, result="created", pod_id="k3x9"),
        ev.PodCreated(
            pod_id="k3x9", gpu_type="NVIDIA A40", data_center="EU-RO-1", cost_per_hour=0.53
        ),
    ]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_run_from_one_checkout_shows_in_the_other_with_its_host(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = team.checkout(tmp_path / "a"), team.checkout(tmp_path / "b")
    store = RunStore(team.url, first, LAPTOP)
    store.create(_created())
    state, _ = store.append(RUN, lambda _s: _pod_events())
    (first / "runs" / RUN / "output").mkdir(parents=True)  # the run's files live in `first`
    store.close()

    code, out, _ = _cli(capsys, "-C", str(second), "runs", "ls", "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["id"], r["state"], r["pod"], r["pod_status"]) for r in rows] == [
        (RUN, "preparing", "k3x9", "created")
    ]
    assert rows[0]["host"] == "laptop-a"
    code, out, _ = _cli(capsys, "-C", str(second), "runs", "ls")
    assert code == 0 and "k3x9 booting" in out  # the pod's recorded status, in words
    head, line = out.splitlines()
    assert head.split()[:3] == ["RUN", "HOST", "STATE"]
    assert line.split()[:3] == [RUN, "laptop-a", "preparing"]

    code, out, _ = _cli(capsys, "-C", str(second), "events", RUN, "-v")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 5
    assert all("train by alice@laptop-a (pid 4242" in line for line in lines)
    assert "created pod k3x9 (NVIDIA A40, EU-RO-1, $0.53/h)" in lines[-1]

    # runs show writes the projections here on demand and says where the run lives.
    assert not (second / "runs" / RUN).exists()
    code, out, _ = _cli(capsys, "-C", str(second), "runs", "show", RUN)
    assert code == 0
    assert (
        f"lives      on host laptop-a (started by `train` as alice), remote dir overbrainer/{RUN}"
        in out
    )
    assert "holds only run.json and pod.json" in out and "on laptop-a" in out
    run_json = json.loads((second / "runs" / RUN / "run.json").read_text())
    pod_json = json.loads((second / "runs" / RUN / "pod.json").read_text())
    assert run_json == state.to_json()["run"] and pod_json == state.to_json()["pod"]

    code, out, _ = _cli(capsys, "-C", str(first), "runs", "show", RUN, "--json")
    shown = json.loads(out)
    assert shown["local_files"] is True
    assert shown["lives"]["host"] == "laptop-a" and shown["lives"]["user"] == "alice"
    assert shown["lives"]["remote_dir"] == f"overbrainer/{RUN}"


def _reader(stream: IO[str]) -> "queue.Queue[tuple[float, str]]":
    lines: queue.Queue[tuple[float, str]] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put((time.monotonic(), line))

    threading.Thread(target=pump, daemon=True).start()
    return lines


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_follow_prints_the_other_checkouts_appends_within_a_second(
    kind: str, team: Team, tmp_path: Path
) -> None:
    if kind == "postgresql":
        first, second = team.checkout(tmp_path / "a"), team.checkout(tmp_path / "b")
        url: str | None = team.url
    else:  # the local file: one checkout, two processes (it polls)
        first = second = tmp_path / "a"
        first.mkdir()
        url = None
    store = RunStore(url, first, LAPTOP)
    store.create(_created(kind="local"))
    follower = subprocess.Popen(
        # -v: each line names who appended it.
        [sys.executable, "-m", "overbrainer", "-C", str(second), "events", RUN, "--follow", "-v"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=team.env,
    )
    try:
        assert follower.stdout is not None
        lines = _reader(follower.stdout)
        _, line = lines.get(timeout=20)
        assert "run.Created" in line and "alice@laptop-a" in line
        time.sleep(0.3)  # the follower now waits for news
        latencies = []
        for i in range(5):
            appended = time.monotonic()
            store.append(RUN, lambda _s, i=i: [ev.NoteAdded(note=f"from laptop {i}")])
            printed, line = lines.get(timeout=5)
            assert f"note: from laptop {i}" in line and "laptop-a" in line
            latencies.append(printed - appended)
            time.sleep(0.05)
        assert max(latencies) < 1.0, latencies
        store.append(RUN, lambda _s: [ev.RunEnded(state="cancelled", message="by alice")])
        _, line = lines.get(timeout=5)
        assert "run cancelled" in line
        assert follower.wait(timeout=10) == 0  # the run ended: --follow stops by itself
    finally:
        follower.kill()
        follower.wait()
        store.close()


def test_server_stopped_between_two_appends_fails_plainly_and_writes_nothing(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkout = team.checkout(tmp_path / "a")
    where = f"127.0.0.1:{team.cluster.port}/{team.db}"
    store = RunStore(team.url, checkout, Actor.here("train"))
    store.create(_created(kind="local"))
    store.append(RUN, lambda _s: [ev.JobStarted(job_dir="x", pid=7)])
    follower = subprocess.Popen(
        [sys.executable, "-m", "overbrainer", "-C", str(checkout), "events", RUN, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=team.env,
    )
    assert follower.stdout is not None
    assert "run.Created" in follower.stdout.readline()

    # The server goes away after the state was read, before the append is sent.
    def stop_then_decide(state: RunLog) -> list[ev.Event]:
        team.cluster.stop()
        return [ev.NoteAdded(note="while the server was down")]

    try:
        started = time.monotonic()
        with pytest.raises(StoreError) as failure:
            store.append(RUN, stop_then_decide)
        assert time.monotonic() - started < 3, "a stopped server is reported at once"
        message = str(failure.value)
        assert f"run {RUN} not updated" in message and "nothing half-written" in message
        assert where in message and "refused the connection" in message
        assert f"pg_isready -h 127.0.0.1 -p {team.cluster.port}" in message
        assert team.cluster.password not in message

        # Every command says the same, once, without a traceback.
        code, out, err = _cli(capsys, "-C", str(checkout), "runs", "ls")
        assert code == 1 and out == ""
        assert err.startswith("error: cannot reach the event store") and where in err
        done = subprocess.run(
            [sys.executable, "-m", "overbrainer", "-C", str(checkout), "events", RUN],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=team.env,
            timeout=30,
        )
        assert done.returncode == 1
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
        assert where in done.stderr and team.cluster.password not in done.stderr
        # A follower loses its server too: it says so and stops.
        _, err = follower.communicate(timeout=30)
        assert follower.returncode == 1 and "Traceback" not in err
        assert err.startswith("error: cannot reach the event store") and where in err
    finally:
        follower.kill()
        follower.wait()
        team.cluster.start()

    # Back up: the same store (its stale connection replaced) and a fresh one append again.
    store.append(RUN, lambda _s: [ev.NoteAdded(note="after the restart")])
    fresh = RunStore(team.url, checkout, Actor.here("train attach"))
    fresh.append(RUN, lambda _s: [ev.RunEnded(state="cancelled")])
    history = fresh.history(RUN)
    assert [r.event.name for r in history] == [
        "run.Created",
        "run.JobStarted",
        "run.NoteAdded",
        "run.Ended",
    ]
    assert history[2].event == ev.NoteAdded(note="after the restart")
    store.close()
    fresh.close()


def test_passwords_are_never_echoed(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    # A checkout whose file names no store: the whole URL comes from the environment.
    (project / "overbrainer.toml").write_text("")
    secret = team.cluster.password
    port = team.cluster.port
    # The whole URL, password included, from the environment: it works...
    monkeypatch.delenv("PGPASSFILE")
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-such-passfile"))
    monkeypatch.setenv(
        "OVERBRAINER_STORE__URL", f"postgresql://postgres:{secret}@127.0.0.1:{port}/{team.db}"
    )
    code, _, err = _cli(capsys, "-C", str(project), "runs", "ls")
    assert code == 0, err
    # ...and no message repeats it.
    code, out, err = _cli(capsys, "-C", str(project), "runs", "show", RUN)
    assert code == 1 and secret not in out + err and f"127.0.0.1:{port}/{team.db}" in err
    monkeypatch.setenv(
        "OVERBRAINER_STORE__URL", f"postgresql://postgres:{secret}@127.0.0.1:{port}/nodb"
    )
    code, out, err = _cli(capsys, "-C", str(project), "runs", "ls")
    assert code == 1 and secret not in out + err
    assert f"createdb -h 127.0.0.1 -p {port} -U postgres nodb" in err

    # A wrong password from PGPASSWORD: refused, named by origin, never shown.
    monkeypatch.setenv("OVERBRAINER_STORE__URL", team.url)
    monkeypatch.setenv("PGPASSWORD", "pw-canary-wrong")
    code, out, err = _cli(capsys, "-C", str(project), "runs", "ls")
    assert code == 1 and "pw-canary-wrong" not in out + err
    assert "refused the password of user postgres (taken from PGPASSWORD)" in err

    # No password anywhere: what to put where.
    monkeypatch.delenv("PGPASSWORD")
    code, out, err = _cli(capsys, "-C", str(project), "runs", "ls")
    assert code == 1
    assert (
        f"put `127.0.0.1:{port}:{team.db}:postgres:PASSWORD` in {tmp_path / 'no-such-passfile'}"
        in err
    )


def test_concurrent_appends_from_two_checkouts_lose_nothing(team: Team, tmp_path: Path) -> None:
    checkouts = [team.checkout(tmp_path / name) for name in ("a", "b")]
    store = RunStore(team.url, checkouts[0], Actor.here("test"))
    store.create(_created(kind="local"))
    store.append(RUN, lambda _s: [ev.JobStarted(job_dir="x", pid=1)])
    count = 150
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.team.append_worker",
                team.url,
                str(project),
                RUN,
                tag,
                str(count),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=team.env,
        )
        for tag, project in zip(("one", "two"), checkouts, strict=True)
    ]
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "READY"
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    for worker in workers:
        out, _ = worker.communicate(timeout=120)
        assert worker.returncode == 0 and out.strip() == "DONE"

    history = store.history(RUN)
    notes = [r.event.note for r in history if isinstance(r.event, ev.NoteAdded)]
    assert sorted(notes) == sorted(f"{t}-{i}" for t in ("one", "two") for i in range(count))
    for tag in ("one", "two"):
        assert [n for n in notes if n.startswith(tag)] == [f"{tag}-{i}" for i in range(count)]
    assert [r.seq for r in history] == list(range(1, len(history) + 1))
    ends = [r for r in history if isinstance(r.event, ev.RunEnded)]
    assert len(ends) == 1, "the loser re-decided on the fresh state and appended nothing"
    assert {r.actor["command"] for r in history} == {"test", "worker one", "worker two"}
    # The two appended truly at once: their events interleave in the log.
    tags = [n.split("-")[0] for n in notes]
    assert sum(a != b for a, b in itertools.pairwise(tags)) > 2
    store.close()


def test_the_loser_of_a_race_reloads_redecides_and_learns_what_the_other_did(
    team: Team, tmp_path: Path
) -> None:
    here = RunStore(team.url, team.checkout(tmp_path / "a"), Actor.here("train attach"))
    there = RunStore(team.url, team.checkout(tmp_path / "b"), LAPTOP)
    here.create(_created(kind="local"))
    here.append(RUN, lambda _s: [ev.JobStarted(job_dir="x", pid=7)])
    decisions: list[bool] = []
    told: list[object] = []

    def decide(state: RunLog) -> list[ev.Event]:
        decisions.append(state.run.cancel_requested)
        if len(decisions) == 1:
            # The other checkout's `train cancel` lands between our read and our write.
            there.append(RUN, lambda _s: [ev.CancelRequested()])
        return [] if state.run.cancel_requested else [ev.NoteAdded(note="still following")]

    state, appended = here.append(RUN, decide, on_others=told.extend)
    assert decisions == [False, True], "decided once, lost the race, decided again"
    assert appended == [] and state.run.cancel_requested
    assert [(r.event.name, r.actor["host"]) for r in told] == [  # type: ignore[attr-defined]
        ("run.CancelRequested", "laptop-a")
    ]
    names = [r.event.name for r in there.history(RUN)]
    assert names == ["run.Created", "run.JobStarted", "run.CancelRequested"]
    here.close()
    there.close()


def test_a_writer_that_lost_four_races_appends_under_the_write_lock_and_others_wait(
    team: Team, tmp_path: Path
) -> None:
    here = RunStore(team.url, team.checkout(tmp_path / "a"), Actor.here("train attach"))
    there = RunStore(team.url, team.checkout(tmp_path / "b"), LAPTOP)
    here.create(_created(kind="local"))
    decisions: list[int] = []
    waited: list[bool] = []
    finished = threading.Event()

    def their_append() -> None:
        there.append(RUN, lambda _s: [ev.NoteAdded(note="theirs, after the lock")])
        finished.set()

    blocked = threading.Thread(target=their_append)

    def decide(state: RunLog) -> list[ev.Event]:
        decisions.append(state.run.version)
        if len(decisions) <= 4:
            # The other checkout appends between our read and our write: we lose the race.
            there.append(RUN, lambda _s: [ev.NoteAdded(note=f"theirs {len(decisions)}")])
        else:
            # Under the log's write lock now: the other checkout's append has to wait.
            blocked.start()
            waited.append(not finished.wait(timeout=2.0))
        return [ev.NoteAdded(note="ours")]

    here.append(RUN, decide)
    blocked.join(timeout=60)
    assert decisions == [1, 2, 3, 4, 5], "decided again on each fresh state"
    assert waited == [True], "another checkout could append while the write lock was held"
    notes = [r.event.note for r in there.history(RUN) if isinstance(r.event, ev.NoteAdded)]
    assert notes == [
        "theirs 1",
        "theirs 2",
        "theirs 3",
        "theirs 4",
        "ours",
        "theirs, after the lock",
    ]
    here.close()
    there.close()


def test_a_call_failing_while_the_server_answers_is_tried_twice_not_ten_times(
    team: Team, tmp_path: Path
) -> None:
    from eventsourcing.persistence import InterfaceError, OperationalError
    from eventsourcing.utils import retry

    from overbrainer.events.pg import StoreUnavailable
    from overbrainer.events.pg_recorder import TeamDatastore

    store = RunStore(team.url, team.checkout(tmp_path / "a"), Actor.here("test"))
    datastore = store.recorder.datastore
    assert isinstance(datastore, TeamDatastore)
    attempts: list[int] = []

    # Decorated as eventsourcing decorates its recorder's methods (ten attempts).
    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def cut_off() -> None:
        attempts.append(1)
        with datastore.get_connection() as conn:
            # The server ends this session: the call fails although the server is up.
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    try:
        with pytest.raises(StoreUnavailable) as failure, datastore.call():
            cut_off()
        assert len(attempts) == 2, "one retry after the pool replaced its connections"
        message = str(failure.value)
        assert f"127.0.0.1:{team.cluster.port}/{team.db}" in message
        assert "closed the connection" in message, message
        assert team.cluster.password not in message
        # The store goes on with a fresh connection.
        store.create(_created(kind="local"))
        assert [r.event.name for r in store.history(RUN)] == ["run.Created"]
    finally:
        store.close()
