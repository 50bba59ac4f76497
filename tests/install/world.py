"""What the install tests share: a fresh copy of the repository, a user's environment, the
processes left behind, and what the Runpod demo must show."""

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fresh_clone(target: Path) -> Path:
    """What a clone has: the repository's files (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / name.decode()
        if source.is_file():
            destination = target / name.decode()
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    return target


def clean_env(scratch: Path) -> dict[str, str]:
    """The environment of a user's shell: no virtual environment of ours on the PATH, no
    overbrainer settings, temporary files in ``scratch``."""
    ours = str(ROOT / ".venv")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OVERBRAINER_", "FAKE_", "PYTHON", "VIRTUAL_ENV", "PYTEST"))
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep) if not p.startswith(ours)
    )
    env["TMPDIR"] = str(scratch)
    return env


def processes_under(path: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(path) in line:
                found.append(line)
    return found


def check_demo_output(out: str) -> None:
    """What the Runpod demo shows: the run succeeded on the fake pod, the pod was deleted,
    ``runs ls``, ``events`` and ``pod ls`` say so."""
    assert "Traceback" not in out
    match = re.search(
        r"^train: run (\S+) succeeded; step 20/20, .*; output in runs/\1/output$", out, re.MULTILINE
    )
    assert match, out
    run_id = match.group(1)
    assert re.search(rf"^{run_id}\s+succeeded\s+gpu\s", out, re.MULTILINE), out
    assert f"$ overbrainer events {run_id}" in out
    assert re.search(r"^NVIDIA A40\s+A40\s+48 GB\s+\$0\.40/h", out, re.MULTILINE), out
    for said in (
        "$ overbrainer pod gpus --min-vram 40",
        "GPU types to try, cheapest first: NVIDIA A40 $0.40/h (deadline 1.25 h by max_cost_usd "
        "$0.50); 2 left out",
        "pod deadline shortened to 1.25 h (from max_hours 2): 1 × NVIDIA A40 at $0.40/h stays "
        "within max_cost_usd $0.50",
        "on NVIDIA A40 at $0.40/h (max_hours 1.25 from its creation, max_cost_usd $0.50)",
        "pod.Created",
        "pod.Ready",
        "run.JobStarted",
        "run.ArtifactsRetrieved",
        "pod.Deleting",
        "deleted (by overbrainer) after",
    ):
        assert said in out, said
    assert "no overbrainer pod on this Runpod account" in out
