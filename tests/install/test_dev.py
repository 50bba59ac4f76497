"""The README's two commands from a fresh clone: ``./dev demo`` and ``./dev test`` make
``.venv`` on first use (taking turns with another ``./dev``), then hand over to the
justfile; the demo is a whole Runpod run against the fake Runpod server and pod, and
nothing is left running or on disk afterwards."""

import re
import signal
import subprocess
import time
from pathlib import Path

from tests.install.world import (
    ROOT,
    check_demo_output,
    clean_env,
    fresh_clone,
    processes_under,
)


def test_the_readme_quickstart_is_these_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    quickstart = quickstart.split("\n### ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", quickstart, re.DOTALL)
    assert [block.strip() for block in blocks] == ["./dev demo", "./dev test"]


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
