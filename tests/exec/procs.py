"""Looking at processes through /proc, for the executor tests."""

import time
from collections.abc import Callable
from pathlib import Path


def _stat_fields(pid_dir: Path) -> list[str] | None:
    try:
        text = (pid_dir / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def group_members(pgid: int, *, zombies: bool = False) -> list[int]:
    """Pids in process group ``pgid`` (live ones only unless ``zombies``)."""
    found = []
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        fields = _stat_fields(pid_dir)
        if fields is None or fields[2] != str(pgid):
            continue
        if zombies or fields[0] not in ("Z", "X"):
            found.append(int(pid_dir.name))
    return found


def state(pid: int) -> str | None:
    """The one-letter state of ``pid``, or None once it is gone (reaped)."""
    fields = _stat_fields(Path(f"/proc/{pid}"))
    return None if fields is None else fields[0]


def all_command_lines() -> str:
    """Every process's command line (what `ps` shows), one per line."""
    lines = []
    for pid_dir in Path("/proc").iterdir():
        if pid_dir.name.isdigit():
            try:
                raw = (pid_dir / "cmdline").read_bytes()
            except OSError:
                continue
            lines.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return "\n".join(lines)


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, step: float = 0.02) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds passed; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(step)


def group_command_lines(pgid: int) -> list[str]:
    """The command lines of the live members of process group ``pgid``."""
    lines = []
    for pid in group_members(pgid):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        lines.append(raw.replace(b"\0", b" ").decode(errors="replace").strip())
    return lines
