"""The README's two commands from a fresh clone: ``./dev demo`` and ``./dev test`` make
``.venv`` on first use (taking turns with another ``./dev``), then hand over to the
justfile; the demo is a whole Runpod run against the fake Runpod server and pod, and
nothing is left running or on disk afterwards."""

import os
import re
import shutil
import signal
import subprocess
import time
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


def test_dev_demo_and_dev_test_from_a_fresh_clone(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = clean_env(scratch)
    assert not (clone / ".venv").exists()

    # Another ./dev is setting up: this one waits, and takes over once that one is gone.
    other = subprocess.Popen(["sleep", "300"])
    (clone / ".venv.lock").mkdir()
    (clone / ".venv.lock" / "pid").write_text(f"{other.pid}\n")
    demo = subprocess.Popen(
        ["./dev", "demo"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(2)
        assert demo.poll() is None and not (clone / ".venv").exists()
        other.send_signal(signal.SIGTERM)
        other.wait()
        out, err = demo.communicate(timeout=600)
    finally:
        for process in (other, demo):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert demo.returncode == 0, out + err
    assert f"dev: waiting for another ./dev (pid {other.pid}) to set up .venv" in err
    assert "dev: creating .venv with python3" in err
    check_demo_output(out + err)
    # The fake server, its pods and their watchdogs are gone with the demo, and so are its
    # temporary files; the lock was released.
    assert processes_under(scratch) == []
    assert list(scratch.iterdir()) == []
    assert not (clone / ".venv.lock").exists()

    # Set up now: the test command goes straight to the justfile (arguments to pytest).
    done = subprocess.run(
        ["./dev", "test", "tests/versions/test_version.py", "-k", "which_version"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dev:" not in done.stderr
    assert re.search(r"^11 passed, \d+ deselected", done.stdout, re.MULTILINE), done.stdout
    # The clone's own code is what its .venv runs.
    done = subprocess.run(
        [
            str(clone / ".venv" / "bin" / "python"),
            "-c",
            "import overbrainer; print(overbrainer.__file__)",
        ],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == str(clone / "overbrainer" / "__init__.py")

    # A changed pyproject.toml (a new dependency, say) is installed again by the next ./dev.
    with (clone / "pyproject.toml").open("a") as file:
        file.write("\n# changed\n")
    done = subprocess.run(
        ["./dev", "--list"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dev: installing overbrainer and its dev tools into .venv" in done.stderr
    assert "dev: creating" not in done.stderr
    assert "demo" in done.stdout and "test" in done.stdout
    for process in processes_under(clone):
        raise AssertionError(f"left running: {process}")
