"""The invariants every case is checked against, each returning the violations it found.

- the run reached a final state (after ``train attach`` or ``pod rm`` where needed);
- its projections (``run.json``, ``pod.json``) are what folding its log gives, and the runs
  view (``runs ls --json``) agrees with the log;
- the target agrees with the log: no job the log does not know, no job still running for a
  finished run, a succeeded run's files home and identical to the target's;
- no fact recorded twice: one retrieval of a run's results (no second download), and,
  where no fault tore a delete, one ``pod.Deleting`` per pod;
- no canary secret and no private key anywhere but ``runs/<id>/ssh/``: not in any output,
  file, event, projection or remote command line;
- no traceback in any output, and only the exit codes a command may give.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from reliability.world import (
    CANARIES,
    Done,
    Project,
    group_alive,
    job_pid,
)

_SKIP_SCAN = ("venv",)
# A key itself, not a script that mentions the format: the armour line, then base64.
_PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----\s*[A-Za-z0-9+/=]{40}")


def open_store(project: Project) -> Any:
    """The project's event store, opened in this process (read only, in effect)."""
    from overbrainer.events.actor import Actor
    from overbrainer.events.store import RunStore

    return RunStore(project.store_url, project.path, Actor.here("reliability"), environ=project.env)


def log_state(project: Project, run_id: str) -> tuple[Any, list[Any]]:
    """The run's state folded from its log, and its records."""
    from overbrainer.events.aggregate import fold

    store = open_store(project)
    try:
        records = store.history(run_id)
    finally:
        store.close()
    return fold((r.event, r.at) for r in records), records


def _json(data: Any) -> Any:
    return json.loads(json.dumps(data, sort_keys=True))


def check_projections(project: Project, run_id: str, state: Any) -> list[str]:
    """``run.json`` and ``pod.json`` equal the fold of the log."""
    found: list[str] = []
    expected = _json(state.to_json())
    files = [("run.json", expected["run"])]
    if state.run.kind == "runpod":
        files.append(("pod.json", expected["pod"]))
    for name, want in files:
        path = project.path / "runs" / run_id / name
        try:
            have = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            found.append(f"{name} of run {run_id} unreadable ({error})")
            continue
        if have != want:
            diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
            found.append(f"{name} of run {run_id} differs from its log in {diff}")
    return found


def check_view(project: Project, states: dict[str, Any]) -> list[str]:
    """The runs view behind ``runs ls`` (caught up as the command does) holds every run
    exactly as its log folds."""
    from overbrainer.projections.view import RunsView, view_path

    store = open_store(project)
    view = RunsView(view_path(project.path), str(store.url))
    try:
        view.catch_up(store)
        rows = {state.run.run_id: _json(state.to_json()) for state in view.runs()}
    finally:
        view.close()
        store.close()
    found = []
    for run_id, state in states.items():
        row = rows.get(run_id)
        if row is None:
            found.append(f"the runs view does not list run {run_id}")
        elif row != _json(state.to_json()):
            found.append(
                f"the runs view has run {run_id} as {row['run']['state']} (version "
                f"{row['run']['version']}), its log {state.run.state} ({state.run.version})"
            )
    return found


def check_log_facts(run_id: str, records: Sequence[Any], *, one_delete: bool) -> list[str]:
    """No fact in the run's log twice: its results retrieved once (a second retrieval is a
    second download), and with ``one_delete`` (no fault tore a delete, so nothing had to
    send it again) one ``pod.Deleting`` per pod."""
    from overbrainer.events import types as ev

    found: list[str] = []
    retrieved = [r for r in records if isinstance(r.event, ev.ArtifactsRetrieved)]
    if len(retrieved) > 1:
        found.append(f"run {run_id} recorded its results retrieved {len(retrieved)} times")
    if one_delete:
        deleting: dict[str, int] = {}
        for record in records:
            if isinstance(record.event, ev.PodDeleting):
                deleting[record.event.pod_id] = deleting.get(record.event.pod_id, 0) + 1
        found += [
            f"run {run_id} recorded pod.Deleting {count} times for pod {pod_id}"
            for pod_id, count in sorted(deleting.items())
            if count > 1
        ]
    return found


def check_target(project: Project, run_id: str, state: Any) -> list[str]:
    """The job on the target and the files at home agree with the log."""
    found: list[str] = []
    job_dir = project.job_dir(run_id)
    pid = job_pid(job_dir)
    if pid is not None and state.run.job is None:
        # A job the log does not know may have existed only if it was stopped at once
        # (its start could not be recorded): alive, or trained to its end, it is a leak.
        trained = (job_dir / "exit_code").exists() and not (job_dir / "cancelled").exists()
        told = "could not be recorded" in (state.run.message or "")
        if group_alive(pid) or (trained and not told):
            found.append(f"run {run_id}: a job (pid {pid}) ran that its log does not know")
    if pid is not None and state.final and group_alive(pid):
        found.append(f"run {run_id} is {state.run.state} but its job (pid {pid}) still runs")
    found += check_checkpoints(project.path / "runs" / run_id, run_id, state, [job_dir])
    if state.run.state == "succeeded":
        from overbrainer.exec.manifest import local_manifest

        home = project.path / "runs" / run_id
        paths = ("output", "metrics.jsonl", "job.log")
        if state.run.artifacts is None:
            found.append(f"run {run_id} succeeded without a recorded retrieval")
        mine = local_manifest(home, paths)
        if not any(name.startswith("output/") for name in mine):
            found.append(f"run {run_id} succeeded but runs/{run_id}/output is empty")
        if job_dir != home:
            theirs = local_manifest(job_dir, paths)
            if theirs != mine:
                diff = sorted(set(theirs.items()) ^ set(mine.items()))[:3]
                found.append(f"run {run_id}: the files at home differ from the target's {diff}")
    return found


def check_checkpoints(
    home: Path,
    run_id: str,
    state: Any,
    targets: Sequence[Path],
    parts: Mapping[Path, Sequence[Path]] | None = None,
) -> list[str]:
    """The checkpoints at home are never torn: each one the log says is home is there, and
    every ``output/checkpoint-*`` folder at home holds the very files of the target's copy
    (in ``targets``: the job's directories; none when the target is this directory) — for
    a cluster's rank 0 (a key of ``parts``), its copy and what only its other nodes hold
    (each node saves its own ranks' parts)."""
    from overbrainer.exec.manifest import local_manifest

    found: list[str] = []
    output = home / "output"
    for step in state.run.checkpoints:
        if not (output / f"checkpoint-{step}" / "trainer_state.json").is_file():
            found.append(f"run {run_id}: the log says checkpoint-{step} is home, it is not whole")
    remote = [t for t in targets if t.resolve() != home.resolve()]
    if not remote:
        return found
    for folder in sorted(output.glob("checkpoint-*")) if output.is_dir() else []:
        rel = f"output/{folder.name}"
        mine = local_manifest(home, [rel])
        held = next((t for t in remote if (t / rel).is_dir()), None)
        theirs: dict[str, str] | None = None
        if held is not None:
            theirs = local_manifest(held, [rel])
            for node in (parts or {}).get(held, ()):
                for name, digest in local_manifest(node, [rel]).items():
                    theirs.setdefault(name, digest)
        if theirs is not None and mine != theirs:
            diff = sorted(set(theirs.items()) ^ set(mine.items()))[:3]
            found.append(f"run {run_id}: {rel} at home is torn or differs from the target's {diff}")
        elif theirs is None and f"{rel}/trainer_state.json" not in mine:
            found.append(f"run {run_id}: {rel} at home is not whole (no trainer_state.json)")
    return found


def scan_files(roots: Iterable[Path], *, allow_keys_in_ssh: bool = True) -> list[str]:
    """Files under ``roots`` holding a canary or a private key (outside ``runs/*/ssh/``)."""
    found: list[str] = []
    for root in roots:
        if not root.exists():
            continue
        paths = [root] if root.is_file() else _walk(root)
        for path in paths:
            rel = path.parts
            if any(part in _SKIP_SCAN for part in rel[-3:-1]):
                continue
            in_ssh = "ssh" in rel[-3:-1] and "runs" in rel
            try:
                data = path.read_bytes()
            except OSError:
                continue
            for canary in CANARIES:
                if canary.encode() in data:
                    found.append(f"a canary secret is in {path}")
            if _PRIVATE_KEY.search(data) and not (in_ssh and allow_keys_in_ssh):
                found.append(f"a private key is in {path}")
    return found


def _walk(root: Path) -> list[Path]:
    """Every file under ``root``; a directory vanishing meanwhile (a pod's temporary
    files) is skipped."""
    found = []
    for directory, _dirs, files in os.walk(root, onerror=lambda _error: None):
        found += [Path(directory) / name for name in files]
    return found


def check_outputs(log: Sequence[Done], allowed: dict[str, set[int]] | None = None) -> list[str]:
    """No canary, private key or traceback in any output; exit codes as ``allowed``
    (by the command's first words; -9 is a SIGKILL the campaign sent itself)."""
    found: list[str] = []
    for done in log:
        text = done.out + done.err
        name = " ".join(a for a in done.args if not a.startswith("-"))[:40]
        for canary in CANARIES:
            if canary in text:
                found.append(f"`{name}` printed a canary secret")
        if _PRIVATE_KEY.search(text.encode()):
            found.append(f"`{name}` printed a private key")
        if "Traceback" in text:
            tail = text[text.index("Traceback") :][-600:].replace("\n", " | ")
            found.append(f"`{name}` printed a traceback: {tail}")
        if done.timed_out:
            found.append(f"`{name}` hung (killed after {done.seconds:.0f} s): {done.said()}")
    if allowed:
        for done in log:
            line = " ".join(done.args)
            # The longest matching prefix decides: "train attach" before "train".
            for prefix, codes in sorted(allowed.items(), key=lambda item: -len(item[0])):
                if not (line == prefix or line.startswith(prefix + " ")):
                    continue
                if done.code not in codes:
                    found.append(
                        f"`{line}` exited {done.code} (expected "
                        f"{sorted(codes)}): {done.said()[-600:]}"
                    )
                break
    return found


def check_machine_runs(project: Project, *, expect_final: bool = True) -> list[str]:
    """Every invariant for every run of a local or ssh project."""
    found: list[str] = []
    states: dict[str, Any] = {}
    for run_id in project.runs():
        state, records = log_state(project, run_id)
        states[run_id] = state
        if not state.exists:
            found.append(f"runs/{run_id} exists but the log has no run {run_id}")
            continue
        if expect_final and not state.final:
            found.append(f"run {run_id} is still {state.run.state} after recovery")
        found += check_projections(project, run_id, state)
        found += check_target(project, run_id, state)
        found += check_log_facts(run_id, records, one_delete=False)
    if states:
        found += check_view(project, states)
    found += scan_files([project.path, project.remote_root, *project.extra_scan])
    return found


class CommandLineWatch:
    """Samples every process's command line for the canaries while a campaign runs."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.sightings: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> CommandLineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        marks = [c.encode() for c in CANARIES]
        while not self._stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    line = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if any(m in line for m in marks):
                    for mark in marks:
                        line = line.replace(mark, b"<canary>")
                    shown = line.replace(b"\0", b" ")[:80].decode(errors="replace")
                    self.sightings.append(f"a process command line holds a canary: {shown}")
            time.sleep(self.interval)
