"""The metrics plugin's ``saved`` line, with two real ranks of one job (torch.distributed
on gloo, the CPU build of the e2e environment): rank 0 announces the checkpoint only once
rank 1, whose save takes longer, has written its part."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from e2e import build
from e2e.harness import ROOT, base_env
from overbrainer.testing.sshd import free_port

RANK = """
import json, os, sys, time
from types import SimpleNamespace

import torch.distributed as dist

from overbrainer.train.overbrainer_metrics import MetricsCallback

rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
checkpoint = sys.argv[1]
if rank == 1:
    time.sleep(2.0)  # this rank's save takes longer than rank 0's
with open(os.path.join(checkpoint, f"rng_state_{rank}.pth"), "w") as part:
    part.write("rng")
with open(os.path.join(checkpoint, f"written_{rank}"), "w") as when:
    when.write(repr(time.time()))
state = SimpleNamespace(global_step=7, is_world_process_zero=rank == 0)
MetricsCallback(sys.argv[2]).on_save(None, state, SimpleNamespace())
dist.destroy_process_group()
"""


def test_the_saved_line_waits_for_the_rank_that_writes_late(tmp_path: Path) -> None:
    built = build.build()
    checkpoint = tmp_path / "checkpoint-7"
    checkpoint.mkdir()
    metrics = tmp_path / "metrics.jsonl"
    port = str(free_port())
    ranks = []
    for rank in (0, 1):
        env = {
            **base_env(),
            "PYTHONPATH": str(ROOT),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "WORLD_SIZE": "2",
            "RANK": str(rank),
        }
        ranks.append(
            subprocess.Popen(
                [str(built.python), "-c", RANK, str(checkpoint), str(metrics)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    for process in ranks:
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0, out.decode(errors="replace")
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [(line["event"], line["step"]) for line in lines] == [("saved", 7)]
    late = float((checkpoint / "written_1").read_text())
    assert lines[0]["time"] >= late
    assert sorted(os.listdir(checkpoint)) == [
        "rng_state_0.pth",
        "rng_state_1.pth",
        "written_0",
        "written_1",
    ]
