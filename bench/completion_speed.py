"""How fast a Tab answers: bash completing ``overbrainer events <Tab>`` (run IDs) and
``overbrainer train --target <Tab>`` (target names) in a project with 1,000 runs, through
the installed completion script and the real ``overbrainer``; beside ``python -c pass``
(``--quick``: 50 runs, fewer rounds)."""

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

FULL_RUNS, FULL_REPEAT = 1000, 15
QUICK_RUNS, QUICK_REPEAT = 50, 3
CONFIG = """\
[training]
target = "box"

[targets.box]
kind = "local"

[targets.gpu]
kind = "runpod"
gpu_types = ["NVIDIA A40"]
max_hours = 1
"""


def _project(path: Path, runs: int) -> None:
    (path / "overbrainer.toml").write_text(CONFIG)
    for i in range(runs):
        (
            path / "runs" / f"2025{1 + i // 28 % 12:02d}{1 + i % 28:02d}-{i % 24:02d}0000-{i:04x}"
        ).mkdir(parents=True)


def _time(argv: list[str], cwd: Path, repeat: int) -> float:
    """The median wall time of ``argv`` (the first run, warming caches, not counted)."""
    times = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def _tab(script: Path, words: str) -> list[str]:
    """bash calling the completion function as a Tab does, then printing what it offers."""
    program = (
        f". {script}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); "
        '_overbrainer; printf "%s\\n" "${#COMPREPLY[@]}"'
    )
    return ["bash", "--norc", "--noprofile", "-c", program]


def run(
    progress: Callable[[str], None] | None = None, *, quick: bool = False
) -> list[tuple[str, str, str, str]]:
    """The rows of the benchmark table (``quick``: small sizes)."""
    runs, repeat = (QUICK_RUNS, QUICK_REPEAT) if quick else (FULL_RUNS, FULL_REPEAT)
    if progress is not None:
        progress(f"completion: bash Tab in a project of {runs:,} runs")
    ob = Path(sys.executable).with_name("overbrainer")
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        _project(project, runs)
        script = project / "completion.bash"
        script.write_text(
            subprocess.run(
                [str(ob), "completion", "bash"], capture_output=True, text=True, check=True
            ).stdout
        )
        # The PATH's overbrainer is this one.
        bin_path = str(ob.parent)
        offered = subprocess.run(
            _tab(script, "overbrainer events ''"),
            cwd=project,
            capture_output=True,
            text=True,
            check=True,
            env={"PATH": f"{bin_path}:/usr/bin:/bin"},
        ).stdout.strip()
        assert offered == str(runs), f"bash offered {offered} runs, not {runs}"
        floor = _time([sys.executable, "-c", "pass"], project, repeat)
        env_bash = ["env", f"PATH={bin_path}:/usr/bin:/bin"]
        events = _time([*env_bash, *_tab(script, "overbrainer events ''")], project, repeat)
        target = _time([*env_bash, *_tab(script, "overbrainer train --target ''")], project, repeat)
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    floor_text = f"python -c pass {ms(floor)}"
    return [
        (f"bash Tab: `events <Tab>`, {runs:,} runs", ms(events), floor_text, "< 150 ms"),
        ("bash Tab: `train --target <Tab>`", ms(target), floor_text, "< 150 ms"),
    ]
