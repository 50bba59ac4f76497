"""Real SIGINTs to a real ``overbrainer`` process (tests/front/sigint_probe.py), real time."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from overbrainer.front.interrupts import ECHO

PROBE = Path(__file__).with_name("sigint_probe.py")
# Generous bounds for a loaded machine; a passing test takes about a second each.
WAIT = 10.0


class Probe:
    """The probe process, its stdout read line by line as it comes."""

    def __init__(self, tmp_path: Path, scenario: str, *, stderr_broken: bool = False) -> None:
        self.marker = tmp_path / "marker"
        self.stderr_path = tmp_path / "stderr"
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        with self.stderr_path.open("w") as stderr:
            broken = None
            if stderr_broken:
                # A pipe whose reader is gone (a `| tee` killed by the same signal).
                reader, broken = os.pipe()
                os.close(reader)
            self.process = subprocess.Popen(
                [sys.executable, str(PROBE), scenario, str(self.marker)],
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr if broken is None else broken,
                text=True,
            )
            if broken is not None:
                os.close(broken)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, wanted: str) -> None:
        """Wait until the probe prints the line ``wanted``."""
        deadline = time.monotonic() + WAIT
        while wanted not in self.lines:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.fail(f"no {wanted!r} within {WAIT} s")
            if line is None:
                self.fail(f"the probe ended without {wanted!r}")
            self.lines.append(line)

    def sigint(self) -> None:
        os.kill(self.process.pid, signal.SIGINT)

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def again(self, signum: int | None = None) -> None:
        """A further signal (SIGINT by default), as a person sends it: later than an echo
        of the first."""
        time.sleep(ECHO + 0.1)
        os.kill(self.process.pid, signal.SIGINT if signum is None else signum)

    def finish(self) -> tuple[int, str]:
        """Wait for the probe to exit; return its exit code and stderr."""
        code = self.process.wait(WAIT)
        self._reader.join(WAIT)
        while (line := self._queue.get_nowait()) is not None:
            self.lines.append(line)
        return code, self.stderr_path.read_text()

    def fail(self, what: str) -> NoReturn:
        self.process.kill()
        self.process.wait()
        pytest.fail(f"{what}; stdout {self.lines}; stderr:\n{self.stderr_path.read_text()}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


Start = Callable[..., Probe]


@pytest.fixture
def probes(tmp_path: Path) -> Iterator[Start]:
    """Starts probes (one scenario each) and kills any left running at the end."""
    started: list[Probe] = []

    def start(scenario: str, *, stderr_broken: bool = False) -> Probe:
        probe = Probe(tmp_path, scenario, stderr_broken=stderr_broken)
        started.append(probe)
        return probe

    yield start
    for probe in started:
        probe.close()


def test_sigint_during_shielded_work_lets_it_finish(probes: Start) -> None:
    probe = probes("shield")
    probe.expect("READY shield")
    probe.sigint()
    probe.expect("NOTED 1")
    probe.again()
    probe.expect("NOTED 2")
    code, stderr = probe.finish()

    assert probe.marker.read_text() == "written\n"
    # Both signals arrived while the shielded work ran, and it still ran to its end.
    assert probe.lines.index("NOTED 2") < probe.lines.index("SHIELD DONE")
    # A noted Ctrl-C keeps the next race from starting.
    assert "LATER SKIPPED" in probe.lines
    assert "LATER STARTED" not in probe.lines
    assert "PROBE END" not in probe.lines
    lines = stderr.splitlines()
    still = [line for line in lines if line.startswith("still writing the probe's marker")]
    assert len(still) == 1, stderr
    assert still[0].endswith("s more); it cannot be interrupted safely")
    assert "(at most 5 s more)" in still[0] or "(at most 4 s more)" in still[0]
    assert lines[-1] == "error: interrupted by Ctrl-C before the probe's next step"
    assert "Traceback" not in stderr
    assert "KeyboardInterrupt" not in stderr
    assert code == 130


def test_sigint_stops_a_race_at_once(probes: Start) -> None:
    probe = probes("race")
    probe.expect("READY race")
    signalled = time.monotonic()
    probe.sigint()
    probe.expect("RACE STOPPED")
    stopped = time.monotonic() - signalled
    code, stderr = probe.finish()

    assert stopped < 5  # the raced work sleeps 30 s
    assert "RACE DONE" not in probe.lines
    assert not probe.marker.exists()
    assert "LATER SKIPPED" in probe.lines
    assert "LATER STARTED" not in probe.lines
    assert stderr.splitlines() == ["error: interrupted by Ctrl-C before the probe's next step"]
    assert code == 130


def test_sigint_during_a_shield_inside_a_race(probes: Start) -> None:
    probe = probes("nested")
    probe.expect("READY nested")
    probe.sigint()
    probe.expect("NOTED 1")
    code, stderr = probe.finish()

    assert probe.marker.read_text() == "written\n"
    assert probe.lines.index("NOTED 1") < probe.lines.index("SHIELD DONE")
    # The race ended right after its shielded section, not at its end.
    assert probe.lines.index("SHIELD DONE") < probe.lines.index("RACE STOPPED")
    assert "RACE DONE" not in probe.lines
    assert "LATER STARTED" not in probe.lines
    assert stderr.splitlines() == ["error: interrupted by Ctrl-C before the probe's next step"]
    assert code == 130


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"]
)
def test_sigterm_and_sighup_are_handled_as_ctrl_c_with_their_exit_codes(
    probes: Start, signum: signal.Signals, code: int
) -> None:
    probe = probes("shield")
    probe.expect("READY shield")
    probe.signal(signum)
    probe.expect("NOTED 1")
    probe.again(signum)
    probe.expect("NOTED 2")
    code_seen, stderr = probe.finish()

    assert probe.marker.read_text() == "written\n"
    assert probe.lines.index("NOTED 2") < probe.lines.index("SHIELD DONE")
    assert "LATER SKIPPED" in probe.lines
    lines = stderr.splitlines()
    assert len([line for line in lines if line.startswith("still writing the probe's marker")]) == 1
    assert lines[-1] == f"error: interrupted by {signum.name} before the probe's next step"
    assert "Traceback" not in stderr
    assert code_seen == code


def test_a_signal_with_stderr_gone_still_finishes_the_shielded_work(probes: Start) -> None:
    # `overbrainer train 2>&1 | tee log` and Ctrl-C: tee dies too, and every line written to
    # stderr after it (the notice of the second Ctrl-C, the final error) meets a broken pipe.
    probe = probes("shield", stderr_broken=True)
    probe.expect("READY shield")
    probe.sigint()
    probe.expect("NOTED 1")
    probe.again()
    probe.expect("NOTED 2")
    code, _ = probe.finish()

    assert probe.marker.read_text() == "written\n"
    assert "SHIELD DONE" in probe.lines
    assert "LATER SKIPPED" in probe.lines
    assert code == 130


def test_a_signal_sent_twice_at_once_as_timeout_does_counts_once(probes: Start) -> None:
    # GNU timeout signals the command, then its process group: two at once, one request.
    probe = probes("shield")
    probe.expect("READY shield")
    probe.sigint()
    probe.sigint()
    probe.expect("NOTED 1")
    probe.again()
    probe.expect("NOTED 2")
    code, stderr = probe.finish()

    assert probe.lines.count("NOTED 2") == 1 and "NOTED 3" not in probe.lines
    lines = stderr.splitlines()
    assert len([line for line in lines if line.startswith("still writing the probe's marker")]) == 1
    assert "already stopping" not in stderr
    assert code == 130


def test_a_second_sigint_after_the_interrupted_command_ended_keeps_its_exit_code(
    probes: Start,
) -> None:
    probe = probes("late")
    probe.expect("READY race")
    probe.sigint()
    probe.expect("MAIN RETURNED")
    probe.again()  # the command's work is over; the process has yet to exit
    code, stderr = probe.finish()
    assert code == 130, stderr
    assert stderr.splitlines()[-1] == "error: interrupted by Ctrl-C before the probe's next step"
    assert "KeyboardInterrupt" not in stderr and "Traceback" not in stderr
