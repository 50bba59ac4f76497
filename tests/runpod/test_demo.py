"""``just demo`` — the README's main command — from a fresh copy of the repository: the
fake Runpod server and pod on loopback, the real ``overbrainer train`` against them, then
``runs ls`` and ``events`` for the run, and nothing left running afterwards."""

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fresh_copy(target: Path) -> Path:
    """What a clone has: the repository's files (tracked, or new and not ignored), with
    the virtual environment the README's install command made."""
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
    # The README installs into .venv; reinstalling here would need the network.
    (target / ".venv").symlink_to(ROOT / ".venv")
    return target


def _processes_under(path: Path) -> list[str]:
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


def test_just_demo_runs_a_whole_runpod_run_from_a_fresh_copy(tmp_path: Path) -> None:
    clone = _fresh_copy(tmp_path / "clone")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "FAKE_"))}
    # The copy's own code, not the installed checkout's.
    env["PYTHONPATH"] = str(clone)
    # The demo's temporary directory (its project, its pods) goes here, to be checked.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env["TMPDIR"] = str(scratch)
    done = subprocess.run(
        [
            str(
                ROOT / ".venv" / "bin" / "just",
            ),
            "demo",
        ],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "Traceback" not in out
    match = re.search(
        r"^train: run (\S+) succeeded; step 20/20, .*; output in runs/\1/output$", out, re.MULTILINE
    )
    assert match, out
    run_id = match.group(1)
    assert re.search(rf"^{run_id}\s+succeeded\s+gpu\s", out, re.MULTILINE), out
    assert f"$ overbrainer events {run_id}" in out
    for said in (
        "pod.Created",
        "pod.Ready",
        "run.JobStarted",
        "run.ArtifactsRetrieved",
        "pod.Deleting",
        "deleted (by overbrainer) after",
    ):
        assert said in out, said
    assert "no overbrainer pod on this Runpod account" in out
    # The fake server, its pods and their watchdogs are gone with the demo, and so are its
    # temporary files.
    assert _processes_under(clone) == [] and _processes_under(scratch) == []
    assert list(scratch.iterdir()) == []
