"""``runs show RUN`` ends with the run's loss curves: drawn to the width of a real terminal
(a pseudo-terminal here), a table when its output is not one, nothing with ``--no-plot``."""

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios

from tests.runs.conftest import Project

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _on_terminal(project: Project, columns: int, *args: str, **extra: str) -> str:
    """``overbrainer -C PROJECT ARGS`` with its stdout on a pseudo-terminal ``columns``
    wide; what it wrote there."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in project.env.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env.update(extra)
    process = subprocess.Popen(
        [sys.executable, "-m", "overbrainer", "-C", str(project.path), *args],
        env=env,
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other side closed
            break
        if not chunk:
            break
        out += chunk
    process.wait(timeout=60)
    os.close(leader)
    assert process.returncode == 0, process.stderr.read() if process.stderr else ""
    return out.decode().replace("\r\n", "\n")


def test_runs_show_draws_the_curves_to_the_terminals_width(project: Project) -> None:
    data = project.path / "data"
    (data / "eval.jsonl").write_text((data / "train.jsonl").read_text().splitlines()[0] + "\n")
    done = project.run("train", FAKE_AXOLOTL_STEPS="40")
    assert done.returncode == 0, done.stderr
    run_id = project.runs()[-1]
    for columns in (60, 130):
        shown = _on_terminal(project, columns, "runs", "show", run_id)
        assert "\x1b[36m" in shown and "\x1b[35m" in shown  # loss cyan, eval_loss magenta
        plain = ANSI.sub("", shown)
        chart = plain.split("\n\n", 1)[1].splitlines()
        assert len(chart) == 15  # 12 rows, the axis, the steps, the legend
        assert max(len(line) for line in chart) <= columns - 1
        assert max(len(line) for line in chart) >= columns - 8  # it fills the width
        assert any(ord(c) >= 0x2800 for c in chart[0])
        assert chart[13].split()[:2] == ["step", "1"] and chart[13].split()[-1] == "40"
        assert chart[14].split() == ["━━", "loss", "━━", "eval_loss"]
    # Not a terminal: a table of the values, exactly those of the metrics.
    piped = project.run("runs", "show", run_id)
    table = piped.stdout.split("\n\n", 1)[1].splitlines()
    assert table[0].split() == ["step", "loss", "eval_loss"]
    assert "\x1b" not in piped.stdout and not any(ord(c) >= 0x2800 for c in piped.stdout)
    rows = {int(row.split()[0]): row.split()[1:] for row in table[1:]}
    metrics = [json.loads(line) for line in (project.path / "runs" / run_id / "metrics.jsonl")
               .read_text().splitlines()]  # fmt: skip
    losses = {m["step"]: m["loss"] for m in metrics if m.get("loss") is not None}
    evals = {m["step"]: m["eval_loss"] for m in metrics if m.get("eval_loss") is not None}
    assert {1, 40} <= set(rows) and len(rows) >= 12  # a sample, its ends among it
    for step, (loss, eval_loss) in rows.items():
        assert loss == (f"{losses[step]:#.4g}".rstrip(".") if step in losses else "-")
        assert eval_loss == (f"{evals[step]:#.4g}".rstrip(".") if step in evals else "-")
    # --no-plot: the record only.
    bare = project.run("runs", "show", run_id, "--no-plot")
    assert bare.stdout == piped.stdout.split("\n\n", 1)[0] + "\n"
    # NO_COLOR: drawn, without colours (test_without_colour_… says how).
    no_color = _on_terminal(project, 80, "runs", "show", run_id, NO_COLOR="1")
    assert "\x1b[" not in no_color and "┤" in no_color


def test_without_colour_the_curves_have_a_mark_each_and_coinciding_runs_stay_visible(
    project: Project,
) -> None:
    data = project.path / "data"
    (data / "eval.jsonl").write_text((data / "train.jsonl").read_text().splitlines()[0] + "\n")
    for _ in range(2):  # the stand-in trainer's losses are the same at each step
        done = project.run("train", FAKE_AXOLOTL_STEPS="30")
        assert done.returncode == 0, done.stderr
    first, second = project.runs()[-2:]
    shown = _on_terminal(project, 80, "runs", "show", first, NO_COLOR="1")
    chart = shown.split("\n\n", 1)[1].splitlines()
    plot = "".join(line[line.index("┤") + 1 :] for line in chart[:12] if "┤" in line)
    assert "\x1b[" not in shown and not any(ord(c) >= 0x2800 for c in shown)
    assert {"•", "+"} <= set(plot)
    assert chart[14].split()[:4] == ["•", "loss", "+", "eval_loss"]
    compared = _on_terminal(project, 80, "runs", "compare", first, second, NO_COLOR="1")
    loss = compared.split("\nloss:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert loss[14].split() == ["•", first, "+", second, "#", "several"]
    assert loss[15].strip() == f"{first} and {second} coincide: drawn as #"
    assert "#" in "".join(loss[:12])
