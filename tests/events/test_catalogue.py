"""Every event type, folded into run.json, pod.json, the runs view and the events output,
each compared with its expected value; then rebuilt from the log alone."""

import json
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from overbrainer.cli.main import main
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.session.journal import Journal
from tests.events.scripted import EVERY_TYPE, RUN_A, RUN_B, RUN_C, RUN_D, RUN_E, RUN_F

T = "<time>"


def _appended_in(window: tuple[datetime, datetime], value: str) -> bool:
    """Whether ``value`` is a UTC time inside the test's own run (an append time), as opposed
    to a time the script carries (a pod's creation, a deadline)."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return moment.tzinfo is not None and window[0] <= moment <= window[1]


def _times(data: Any, window: tuple[datetime, datetime]) -> Any:
    """Replace the append times (not known in advance) by a placeholder."""
    if isinstance(data, dict):
        return {
            k: (
                T
                if k
                in {"created_at", "updated_at", "at", "started_at", "sent_at", "created", "gone_at"}
                and isinstance(v, str)
                and _appended_in(window, v)
                else _times(v, window)
            )
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [_times(v, window) for v in data]
    return data


EXPECTED_RUN_A = {
    "run_id": RUN_A,
    "state": "succeeded",
    "target": "gpu",
    "kind": "runpod",
    "remote_dir": "overbrainer/a",
    "settings_digest": "d1",
    "base_model": "Qwen/Qwen3-0.6B",
    "adapter": "lora",
    "keep_pod": True,
    "resumed_from": None,
    "processes": 1,
    "parallelism": None,
    "created_at": T,
    "updated_at": T,
    "job": {"dir": "overbrainer/a", "pid": 4242, "container": None, "started_at": T},
    "message": None,
    "exit_code": 0,
    "metrics": {"step": 10, "max_steps": 10, "loss": 0.5, "eval_loss": 0.7},
    "cancel_requested": False,
    "cancel_pending": False,
    "stop_requested": False,
    "stop_pending": False,
    "stalled": None,
    "interrupted_stage": None,
    "detached": True,
    "artifacts": {"files": 4, "bytes": 1234, "manifest_digest": "m1", "at": T},
    "checkpoint": None,
    "checkpoints": [],
    "pruned": [],
    "volume_checkpoints": [],
    "note": None,
    "clock_offset": None,
    "files_removed": None,
    "recoveries": [],
    "max_recoveries": None,
    "model": None,
    "version": 27,
}
EXPECTED_POD_A = {
    "keep": True,
    "host_public_key": "ssh-ed25519 AAAAhost",
    "attempts": [
        {
            "n": 1,
            "pod_name": f"overbrainer-{RUN_A}-1",
            "gpu_type": "NVIDIA A100",
            "deadline": "2026-01-01T16:00:00Z",
            "max_hours": None,
            "max_cost_usd": None,
            "sent_at": T,
            "result": "no_capacity",
            "detail": "no A100 in EU-RO-1",
            "pod_id": None,
        },
        {
            "n": 2,
            "pod_name": f"overbrainer-{RUN_A}-2",
            "gpu_type": "NVIDIA A40",
            "deadline": None,
            "max_hours": 6.0,
            "max_cost_usd": None,
            "sent_at": T,
            "result": "created",
            "detail": "",
            "pod_id": "k3x9",
        },
    ],
    "pod_id": "k3x9",
    "status": "deleted",
    "gpu_type": "NVIDIA A40",
    "data_center": "EU-RO-1",
    "cost_per_hour": 0.53,
    "created_at": "2026-01-01T10:00:05Z",
    "deadline": "2026-01-01T16:00:05Z",
    "cost_cap_near": True,
    "endpoint": {"host": "203.0.113.7", "port": 22022, "user": "root"},
    "verdict": "ready",
    "delete_reason": "requested",
    "deleted_by": "pod_rm",
    "uptime_seconds": 3600.0,
    "spend": 0.53,
    "pods": {"k3x9": "deleted", "dup1": "deleted"},
    "strays": {},
    "costs": {
        "k3x9": {
            "created_at": "2026-01-01T10:00:05Z",
            "rate": 0.53,
            "gone_at": T,
            "ended_at": "2026-01-01T11:00:05Z",
            "estimate": 0.53,
            "billed": 0.5301,
            "billed_final": True,
            "billed_period": ["2026-01-01T10:00:00Z", "2026-01-01T12:00:00Z"],
        },
        "dup1": {
            "created_at": None,
            "rate": None,
            "gone_at": T,
            "ended_at": None,
            "estimate": None,
            "billed": 0.0012,
            "billed_final": False,
            "billed_period": ["2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"],
        },
    },
    "volume": None,
    "volume_fill_seconds": 0.0,
    "cluster": None,
}
EXPECTED_RUN_B = {
    "run_id": RUN_B,
    "state": "cancelled",
    "target": "here",
    "kind": "local",
    "remote_dir": "runs/b",
    "settings_digest": "d2",
    "base_model": "m",
    "adapter": "full",
    "keep_pod": False,
    "resumed_from": None,
    "processes": 1,
    "parallelism": None,
    "created_at": T,
    "updated_at": T,
    "job": {"dir": "runs/b", "pid": 77, "container": None, "started_at": T},
    "message": "cancelled by the user",
    "exit_code": None,
    "metrics": {},
    "cancel_requested": True,
    "cancel_pending": False,
    "stop_requested": False,
    "stop_pending": False,
    "stalled": None,
    "interrupted_stage": None,
    "detached": False,
    "artifacts": {"files": 2, "bytes": 10, "manifest_digest": "m2", "at": T},
    "checkpoint": None,
    "checkpoints": [],
    "pruned": [],
    "volume_checkpoints": [],
    "note": None,
    "clock_offset": None,
    "files_removed": None,
    "recoveries": [],
    "max_recoveries": None,
    "model": None,
    "version": 7,
}
EXPECTED_RUN_D = {
    "run_id": RUN_D,
    "state": "stopped",
    "target": "here",
    "kind": "local",
    "remote_dir": "runs/d",
    "settings_digest": "d4",
    "base_model": "m",
    "adapter": "full",
    "keep_pod": False,
    "resumed_from": {"run": RUN_B, "step": 4, "from_volume": True},
    "processes": 2,
    "parallelism": "ddp",
    "created_at": T,
    "updated_at": T,
    "job": {"dir": "runs/d", "pid": 88, "container": None, "started_at": T},
    "message": "saved checkpoint-6 and stopped, as asked",
    "exit_code": 0,
    "metrics": {"step": 6, "max_steps": 12},
    "cancel_requested": False,
    "cancel_pending": False,
    "stop_requested": True,
    "stop_pending": False,
    "stalled": {"minutes": 20.0, "step": 5, "at": T},
    "interrupted_stage": None,
    "detached": False,
    "artifacts": {"files": 9, "bytes": 900, "manifest_digest": "m4", "at": T},
    "checkpoint": {"step": 6, "path": "output/checkpoint-6", "at": T},
    "checkpoints": [6],
    "pruned": [5],
    "volume_checkpoints": [],
    "note": None,
    "clock_offset": None,
    "files_removed": None,
    "recoveries": [],
    "max_recoveries": None,
    "model": None,
    "version": 12,
}
EXPECTED_SENTENCES_D = [
    f"created run {RUN_D}: full of m on target here (local), 2 processes (ddp), resuming run "
    f"{RUN_B} from "
    "checkpoint-4",
    f"resumes from checkpoint-4 of run {RUN_B} on the network volume (it matches its recorded "
    "manifest): nothing uploaded from home",
    "started the job (pid 88) in runs/d",
    "a command took over following the run (`events -v` names it)",
    "checkpoint of step 5 retrieved (output/checkpoint-5), every checksum verified",
    "stalled: the job wrote no metrics line for 20 minutes (last at step 5)",
    "stop requested of the command following the run (save a checkpoint and stop)",
    "stop taken by the command following the run: the job saves a checkpoint and stops",
    "retrieved 9 files (900 bytes), every checksum verified",
    "checkpoint of step 6 retrieved (output/checkpoint-6), every checksum verified",
    "checkpoint of step 5 removed from this machine (output/checkpoint-5): only the last ones "
    "are kept ([training] keep_checkpoints)",
    "run stopped: saved checkpoint-6 and stopped, as asked (step 6/12)",
]
EXPECTED_POD_C = {
    "keep": False,
    "host_public_key": "ssh-ed25519 AAAAother",
    "attempts": [
        {
            "n": 1,
            "pod_name": f"overbrainer-{RUN_C}-1",
            "gpu_type": "NVIDIA A40",
            "deadline": "2026-01-01T18:00:00Z",
            "max_hours": None,
            "max_cost_usd": None,
            "sent_at": T,
            "result": "created",
            "detail": "",
            "pod_id": "zz9",
        }
    ],
    "pod_id": "zz9",
    "status": "deleted",
    "gpu_type": "NVIDIA A40",
    "data_center": None,
    "cost_per_hour": 0.5,
    "created_at": T,
    "deadline": "2026-01-01T18:00:00Z",
    "cost_cap_near": False,
    "endpoint": None,
    "verdict": None,
    "delete_reason": "interrupted",
    "deleted_by": "client",
    "uptime_seconds": 30.0,
    "spend": 0.0042,
    "pods": {"zz9": "deleted"},
    "strays": {},
    "costs": {
        "zz9": {
            "created_at": T,
            "rate": 0.5,
            "cluster": "c_zz",
            "gone_at": T,
            "ended_at": "<created_at + 30 s>",
            "estimate": 0.0042,
            "billed": None,
            "billed_final": False,
            "billed_period": None,
        },
    },
    "volume": None,
    "volume_fill_seconds": 0.0,
    "cluster": {
        "id": "c_zz",
        "nodes": 2,
        "gpus_per_node": 1,
        "members": [
            {"pod_id": "zz9", "rank": 0, "ip": "10.65.0.2"},
            {"pod_id": "zz8", "rank": 1, "ip": "10.65.0.3"},
        ],
    },
}

EXPECTED_SENTENCES_A = [
    f"created run {RUN_A}: lora of Qwen/Qwen3-0.6B on target gpu (runpod), keeping its pod "
    "(--keep-pod)",
    "GPU types to try, as listed: NVIDIA A100 $1.19/h (deadline 5.04 h by max_cost_usd "
    "$6.00), NVIDIA A40 $0.53/h; 1 left out (events -v says why)",
    "generated the run's SSH client key and pod host key",
    f"attempt 1: asking Runpod for pod overbrainer-{RUN_A}-1 on NVIDIA A100 "
    "(deadline 2026-01-01T16:00:00Z)",
    "attempt 1 no capacity: no A100 in EU-RO-1",
    "no capacity for 1 × NVIDIA A100 or NVIDIA A40 in EU-RO-1 (try 1): trying again in 30s, "
    "waiting until 2026-01-01T10:30:00Z at the latest",
    f"attempt 2: asking Runpod for pod overbrainer-{RUN_A}-2 on NVIDIA A40 "
    "(max_hours 6 from its creation)",
    "attempt 2 created pod k3x9",
    "created pod k3x9 (NVIDIA A40, EU-RO-1, $0.53/h), deleted by 2026-01-01T16:00:05Z at the "
    "latest; waiting for SSH",
    "stray pod dup1 recorded (duplicate of an ambiguous create)",
    "deleting pod dup1 (duplicate)",
    "stray pod dup1 is gone",
    "pod k3x9 answers SSH at root@203.0.113.7:22022",
    "pod k3x9 ready (watchdog: ready)",
    "started the job (pid 4242) in overbrainer/a",
    "the job runs on pod k3x9",
    "pod k3x9 has cost 95 % of its cap of $3.00 at $0.53/h (cost_cap_near)",
    "this machine's clock jumped (2 h 0 min ahead of Runpod's); pod k3x9 is within its bound "
    "by Runpod's clock: following went on",
    "stopped following (interrupted); the job keeps running on pod k3x9 at step 3/10: "
    f"`overbrainer train attach {RUN_A}` follows it again, `overbrainer pod rm {RUN_A}` "
    "deletes the pod",
    "pod k3x9 awaits retrieval of the results (output/adapter.bin did not verify)",
    "retrieved 4 files (1.2 kB), every checksum verified",
    "run succeeded (step 10/10, loss 0.5000, eval_loss 0.7000)",
    "pod k3x9 kept (--keep-pod); only `pod rm` removes it",
    "deleting pod k3x9 (requested)",
    "pod k3x9 deleted (by pod rm) after 1h00m, spend $0.53",
    "Runpod billed $0.53 for pod k3x9",
    "Runpod billed $0.00 for pod dup1 so far (Runpod's billing may still be catching up)",
]

HERE = Actor.here("test script").host

EXPECTED_ROWS = [
    {
        "id": RUN_A,
        "host": HERE,
        "state": "succeeded",
        "target": "gpu",
        "kind": "runpod",
        "created": T,
        "progress": "10/10 (100%)",
        "pod": "k3x9",
        "pod_status": "deleted",
        "spend": "~$0.53",  # the stray's billing is not final yet
        "spend_usd": 0.5313,
        "spend_estimated_usd": 0.0012,
        "billed_usd": 0.5313,
        "billed_final": False,
        "estimate_usd": 0.53,
        "note": "",
        "files_removed": False,
        "job_ended": None,
        "checkpoint_step": None,
        "resumed_from": "",
        "recoveries": 0,
        "max_recoveries": None,
        "step": 10,
        "max_steps": 10,
        "percent": 100.0,
        "epoch": None,
        "loss": 0.5,
        "eval_loss": 0.7,
        "eta_seconds": None,
        "seen_at": None,
        "eta": "",
    },
    {
        "id": RUN_B,
        "host": HERE,
        "state": "cancelled",
        "target": "here",
        "kind": "local",
        "created": T,
        "progress": "",
        "pod": "",
        "pod_status": "",
        "spend": "",
        "spend_usd": None,
        "spend_estimated_usd": None,
        "billed_usd": None,
        "billed_final": False,
        "estimate_usd": None,
        "note": "",
        "files_removed": False,
        "job_ended": None,
        "checkpoint_step": None,
        "resumed_from": "",
        "recoveries": 0,
        "max_recoveries": None,
        "step": None,
        "max_steps": None,
        "percent": None,
        "epoch": None,
        "loss": None,
        "eval_loss": None,
        "eta_seconds": None,
        "seen_at": None,
        "eta": "",
    },
    {
        "id": RUN_C,
        "host": HERE,
        "state": "failed",
        "target": "gpu",
        "kind": "runpod",
        "created": T,
        "progress": "",
        "pod": "zz9",
        "pod_status": "deleted",
        "spend": "~$0.00",
        "spend_usd": 0.0042,
        "spend_estimated_usd": 0.0042,
        "billed_usd": None,
        "billed_final": False,
        "estimate_usd": 0.0042,
        "note": "",
        "files_removed": False,
        "job_ended": None,
        "checkpoint_step": None,
        "resumed_from": "",
        "recoveries": 0,
        "max_recoveries": None,
        "step": None,
        "max_steps": None,
        "percent": None,
        "epoch": None,
        "loss": None,
        "eval_loss": None,
        "eta_seconds": None,
        "seen_at": None,
        "eta": "",
    },
    {
        "id": RUN_D,
        "host": HERE,
        "state": "stopped",
        "target": "here",
        "kind": "local",
        "created": T,
        "progress": "6/12 (50%)",
        "pod": "",
        "pod_status": "",
        "spend": "",
        "spend_usd": None,
        "spend_estimated_usd": None,
        "billed_usd": None,
        "billed_final": False,
        "estimate_usd": None,
        "note": "",
        "files_removed": False,
        "job_ended": None,
        "checkpoint_step": 6,
        "resumed_from": f"{RUN_B}:4",
        "recoveries": 0,
        "max_recoveries": None,
        "step": 6,
        "max_steps": 12,
        "percent": 50.0,
        "epoch": None,
        "loss": None,
        "eval_loss": None,
        "eta_seconds": None,
        "seen_at": None,
        "eta": "",
    },
    {
        # Both pods of the run count: the lost one and the one it recovered on.
        "id": RUN_F,
        "host": HERE,
        "state": "succeeded",
        "target": "gpu",
        "kind": "runpod",
        "created": T,
        "progress": "10",
        "pod": "f2",
        "pod_status": "deleted",
        "spend": "~$0.21",
        "spend_usd": 0.2083,
        "spend_estimated_usd": 0.2083,
        "billed_usd": None,
        "billed_final": False,
        "estimate_usd": 0.2083,
        "note": "",
        "files_removed": False,
        "job_ended": None,
        "checkpoint_step": 4,
        "resumed_from": "",
        "recoveries": 1,
        "max_recoveries": 3,
        "step": 10,
        "max_steps": None,
        "percent": None,
        "epoch": None,
        "loss": 0.4,
        "eval_loss": None,
        "eta_seconds": None,
        "seen_at": None,
        "eta": "",
    },
]


def _cli(capsys: pytest.CaptureFixture[str], project: Path, *args: str) -> tuple[int, str, str]:
    code = main(["-C", str(project), *args])
    out, err = capsys.readouterr()
    return code, out, err


def _sentences(output: str, *, verbose: bool = False) -> list[str]:
    # "<seq>  <date> <time>Z  <name> <sentence>", then with -v "  [fields]  — actor"
    found = []
    tail = r"  \[.*\]  — .*" if verbose else ""
    for text in output.splitlines():
        match = re.fullmatch(r"\s*\d+  \S+ \S+Z  \S+\s+(.*?)" + tail, text)
        assert match, text
        found.append(match.group(1))
    return found


async def _record_script(project: Path) -> None:
    store = RunStore(None, project, Actor.here("test script"))
    journal = Journal(store, project)
    try:
        for run_id, event in EVERY_TYPE:
            if isinstance(event, ev.RunCreated):
                await journal.create(event)
            else:
                await journal.append(run_id, [event])
    finally:
        store.close()


def _check_everything(
    project: Path, capsys: pytest.CaptureFixture[str], window: tuple[datetime, datetime]
) -> None:
    runs = project / "runs"
    assert _times(json.loads((runs / RUN_A / "run.json").read_text()), window) == EXPECTED_RUN_A
    assert _times(json.loads((runs / RUN_A / "pod.json").read_text()), window) == EXPECTED_POD_A
    assert _times(json.loads((runs / RUN_B / "run.json").read_text()), window) == EXPECTED_RUN_B
    assert _times(json.loads((runs / RUN_D / "run.json").read_text()), window) == EXPECTED_RUN_D
    assert not (runs / RUN_B / "pod.json").exists()  # a local run has no pod
    pod_c = json.loads((runs / RUN_C / "pod.json").read_text())
    # The pod's end on Runpod's clock: its creation (here, its append time) plus its uptime.
    cost = pod_c["costs"]["zz9"]
    ended = datetime.fromisoformat(cost["ended_at"].replace("Z", "+00:00"))
    assert ended - datetime.fromisoformat(cost["created_at"].replace("Z", "+00:00")) == (
        timedelta(seconds=30)
    )
    cost["ended_at"] = "<created_at + 30 s>"
    assert _times(pod_c, window) == EXPECTED_POD_C
    run_c = json.loads((runs / RUN_C / "run.json").read_text())
    assert (run_c["state"], run_c["interrupted_stage"]) == ("failed", "waiting for SSH")
    assert run_c["clock_offset"] == -10800.0
    code, out, _ = _cli(capsys, project, "events", RUN_C)
    assert _sentences(out)[1] == (
        "this machine's clock is 3 h 0 min behind Runpod's: the times this command records "
        "are off by as much"
    )
    code, out, _ = _cli(capsys, project, "runs", "show", RUN_C)
    assert "  clock      3 h 0 min behind Runpod's (times recorded off)" in out.splitlines()
    shown = out.splitlines()
    at = shown.index("  cluster    c_zz: 2 nodes of 1 GPU")
    assert shown[at + 1 : at + 3] == [
        "  node 0     pod zz9 at 10.65.0.2",
        "  node 1     pod zz8 at 10.65.0.3",
    ]
    code, out, _ = _cli(capsys, project, "events", RUN_D)
    assert code == 0
    assert _sentences(out) == EXPECTED_SENTENCES_D
    code, out, _ = _cli(capsys, project, "runs", "show", RUN_D, "--no-plot")
    assert code == 0
    shown = out.splitlines()
    assert shown[0] == f"run {RUN_D}: stopped (saved checkpoint-6 and stopped, as asked)"
    assert (
        f"  checkpoint step 6 in runs/{RUN_D}/output/checkpoint-6, verified: "
        f"`overbrainer train --resume-from {RUN_D}` goes on from it"
    ) in shown
    assert (
        f"  resumed    from run {RUN_B}, checkpoint-4 on the network volume (nothing uploaded "
        "from home)"
    ) in shown
    assert "  shape      2 processes (ddp)" in shown
    assert "  stop       requested (save a checkpoint and stop)" in shown
    code, out, _ = _cli(capsys, project, "runs", "ls", "--state", "stopped")
    assert code == 0
    assert [line.split()[:4] for line in out.splitlines()[1:]] == [
        [RUN_D, "stopped", "(checkpoint", "6)"]
    ]

    code, out, _ = _cli(capsys, project, "runs", "show", RUN_F, "--no-plot")
    assert code == 0
    assert (
        "  recovery   1/3: pod f1 no longer exists; on pod f2 from step 4, 2 steps of training lost"
    ) in out.splitlines()
    assert "  model      lora of Qwen/Qwen3-0.6B; from the cache, ready in 1s" in out.splitlines()
    code, out, _ = _cli(capsys, project, "events", RUN_F)
    assert code == 0
    assert (
        "recovery 1/3 on a new pod: pod f1 no longer exists (the job last seen at step 6)"
    ) in _sentences(out)
    assert "recovery 1: the job runs on pod f2, resumed from step 4; 2 steps done again" in (
        _sentences(out)
    )
    volume = "network volume cache (vf1, 50 GB) in EU-RO-1: the run's pods mount it at "
    volume += "/runpod-volume and are created only there"
    assert [text for text in _sentences(out) if "network volume" in text] == [
        f"created {volume}",
        "the run's data on the network volume through the S3 API, verified: data/train.jsonl "
        f"sent (2.0 kB), data/eval.jsonl already there; resume checkpoint-4 of run {RUN_B}: "
        "2 files sent, 3 in all",
        "checkpoint of step 4 whole on the network volume (output/checkpoint-4, 3 files), its "
        "manifest recorded",
        f"using {volume}",
    ]
    # How each pod's job made the base model ready; runs show says the latest.
    assert [text for text in _sentences(out) if text.startswith("base model")] == [
        "base model downloaded in 41s",
        "base model from the cache, ready in 1s",
    ]
    state = json.loads((project / "runs" / RUN_F / "run.json").read_text())
    assert state["model"] == {"cached": True, "seconds": 1.6, "at": "2026-01-01T15:20:00Z"}
    code, out, _ = _cli(capsys, project, "runs", "ls", "--json")
    assert code == 0
    assert [_times(json.loads(row), window) for row in out.splitlines()] == EXPECTED_ROWS
    # A run whose files were removed: listed only with --all, said so; its events stay.
    code, out, _ = _cli(capsys, project, "runs", "ls")
    assert code == 0 and RUN_E not in out
    code, out, _ = _cli(capsys, project, "runs", "ls", "--all")
    assert code == 0
    assert [line.split()[:4] for line in out.splitlines() if RUN_E in line] == [
        [RUN_E, "succeeded", "(files", "removed)"]
    ]
    code, out, _ = _cli(capsys, project, "runs", "ls", "--all", "--json")
    removed = [json.loads(row) for row in out.splitlines() if RUN_E in row]
    assert [(row["files_removed"], row["checkpoint_step"]) for row in removed] == [(True, None)]
    code, out, _ = _cli(capsys, project, "events", RUN_E)
    assert code == 0
    assert _sentences(out)[-1] == (
        "the run's files removed from this machine (1.2 MB freed); its events stay"
    )
    code, out, _ = _cli(capsys, project, "runs", "show", RUN_E, "--no-plot")
    assert code == 0
    shown = [line for line in out.splitlines() if line.startswith("  files")]
    assert len(shown) == 1 and shown[0].startswith("  files      removed from this machine at ")
    assert shown[0].endswith(" UTC (1.2 MB freed); the events stay"), shown

    code, out, _ = _cli(capsys, project, "events", RUN_A)
    assert code == 0
    assert _sentences(out) == EXPECTED_SENTENCES_A
    # Short lines by default: the longest names where a detached job runs and both ways on.
    assert all(len(text) <= 260 for text in out.splitlines())
    code, out, _ = _cli(capsys, project, "events", RUN_A, "-v")
    assert code == 0
    assert _sentences(out, verbose=True) == EXPECTED_SENTENCES_A
    assert "[files=4 bytes=1234 manifest_digest=" in out
    assert "  — test script by " in out.splitlines()[0]
    code, out, _ = _cli(capsys, project, "events", RUN_A, "--json")
    lines = [json.loads(row) for row in out.splitlines()]
    assert [row["seq"] for row in lines] == list(range(1, 28))
    assert [row["event"] for row in lines] == [e.name for r, e in EVERY_TYPE if r == RUN_A]
    assert all(row["actor"]["command"] == "test script" for row in lines)


async def test_every_event_type_is_folded_into_every_projection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    used = {type(event) for _, event in EVERY_TYPE}
    assert used == set(ev.CATALOGUE.values()), "the script must use every event type"
    # A second either side absorbs the clock's resolution; the script's own times are
    # far from any day the test may run on, so none of them falls inside.
    start = datetime.now(UTC) - timedelta(seconds=1)
    await _record_script(tmp_path)
    window = (start, datetime.now(UTC) + timedelta(seconds=1))
    # Run through runs show too, which rewrites the caches it finds missing.
    _check_everything(tmp_path, capsys, window)

    # The files and the view are caches: delete them and everything comes back the same.
    shutil.rmtree(tmp_path / "runs")
    (tmp_path / ".overbrainer" / "view.sqlite").unlink()
    for run_id in (RUN_A, RUN_B, RUN_C, RUN_D, RUN_E):
        code, _, _ = _cli(capsys, tmp_path, "runs", "show", run_id)
        assert code == 0
    _check_everything(tmp_path, capsys, window)
    # Reading a run whose files were removed never brings its directory back.
    assert not (tmp_path / "runs" / RUN_E).exists()


async def test_events_at_n_shows_the_state_after_event_n(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await _record_script(tmp_path)
    code, out, _ = _cli(capsys, tmp_path, "events", RUN_A, "--at", "9", "--json")
    assert code == 0
    state = json.loads(out)
    assert state["at"] == 9
    assert state["run"]["state"] == "preparing"
    assert state["run"]["version"] == 9
    assert state["pod"]["pod_id"] == "k3x9"
    assert state["pod"]["status"] == "created"
    assert [a["result"] for a in state["pod"]["attempts"]] == ["no_capacity", "created"]

    code, out, _ = _cli(capsys, tmp_path, "events", RUN_A, "--at", "16", "--json")
    state = json.loads(out)
    assert (state["run"]["state"], state["pod"]["status"]) == ("running", "job_running")

    code, out, _ = _cli(capsys, tmp_path, "events", RUN_A, "--at", "0", "--json")
    assert json.loads(out)["run"]["state"] == "none"

    code, out, err = _cli(capsys, tmp_path, "events", RUN_A, "--at", "99")
    assert code == 2
    assert "has 27 events" in err

    code, out, _ = _cli(capsys, tmp_path, "events", RUN_A, "--at", "27")
    assert code == 0
    assert "succeeded" in out and "k3x9" in out
