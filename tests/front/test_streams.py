"""Guarded standard streams on real descriptors: a pipe whose reader is gone, a terminal
whose other side closed, a full device, a descriptor that cannot be written."""

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from overbrainer.front.console import Front
from overbrainer.front.streams import GuardedStream, Loss, exit_code, guard, loss_of


def _text(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(os.fdopen(fd, "wb", buffering=io.DEFAULT_BUFFER_SIZE), "utf-8")


@pytest.fixture
def broken_pipe() -> Iterator[int]:
    """The write end of a pipe whose reader is gone."""
    reader, writer = os.pipe()
    os.close(reader)
    yield writer


def _is_devnull(fd: int) -> bool:
    return os.path.samestat(os.fstat(fd), os.stat(os.devnull))


def test_a_pipe_nobody_reads_silences_the_stream_and_points_it_at_devnull(
    broken_pipe: int,
) -> None:
    inner = _text(broken_pipe)
    stream = GuardedStream(inner, "stderr")
    stream.write("lost\n")
    stream.flush()  # the write itself was buffered: the flush meets the broken pipe
    assert stream.loss == Loss("stderr", "broken pipe")
    assert stream.loss.reader_left
    # Silent from now on, and what the inner stream still holds goes nowhere: closing it
    # (as Python does at exit) raises nothing.
    assert stream.write("more\n") == len("more\n")
    stream.flush()
    assert _is_devnull(broken_pipe)
    inner.close()


def test_a_terminal_that_went_away_is_an_io_error() -> None:
    master, slave = os.openpty()
    os.close(master)
    stream = GuardedStream(_text(slave), "stdout")
    stream.write("hello\n")
    stream.flush()
    assert stream.loss == Loss("stdout", "Input/output error")
    assert not stream.loss.reader_left
    assert not stream.isatty()


def test_a_full_device_is_a_loss_naming_it() -> None:
    stream = GuardedStream(open("/dev/full", "w"), "stdout")  # noqa: SIM115
    stream.write("x" * 10_000)
    stream.flush()
    assert stream.loss == Loss("stdout", "No space left on device")


def test_a_descriptor_that_cannot_be_written_reads_as_closed() -> None:
    readonly = os.open(os.devnull, os.O_RDONLY)
    stream = GuardedStream(_text(readonly), "stdout")
    stream.write("x\n")
    stream.flush()
    assert stream.loss == Loss("stdout", "closed")


def test_no_stream_at_all_is_closed_from_the_start() -> None:
    stream = GuardedStream(None, "stdout")
    assert stream.loss == Loss("stdout", "closed")
    assert stream.write("x") == 1
    stream.flush()


def test_a_closed_python_stream_reads_as_closed() -> None:
    inner = io.StringIO()
    inner.close()
    stream = GuardedStream(inner, "stdout")  # type: ignore[arg-type]
    stream.write("x")
    assert stream.loss == Loss("stdout", "closed")


def test_a_character_the_stream_cannot_encode_costs_that_character_only() -> None:
    raw = io.BytesIO()
    inner = io.TextIOWrapper(raw, "ascii")
    stream = GuardedStream(inner, "stderr")
    stream.write("run in /tmp/josé\n")
    stream.write("next line\n")
    stream.flush()
    assert stream.loss is None
    assert raw.getvalue() == b"run in /tmp/jos\\xe9\nnext line\n"


def test_check_notices_a_reader_gone_without_writing(broken_pipe: int) -> None:
    stream = GuardedStream(_text(broken_pipe), "stdout")
    stream.check()
    assert stream.loss == Loss("stdout", "broken pipe")


def test_check_notices_a_terminal_that_hung_up() -> None:
    master, slave = os.openpty()
    os.close(master)
    stream = GuardedStream(_text(slave), "stdout")
    stream.check()
    assert stream.loss == Loss("stdout", "the terminal hung up")


def test_check_leaves_a_working_stream_alone() -> None:
    reader, writer = os.pipe()
    stream = GuardedStream(_text(writer), "stdout")
    stream.check()
    assert stream.loss is None
    os.close(reader)


def test_guard_is_idempotent_and_loss_of_reads_only_guarded_streams() -> None:
    stream = guard(io.StringIO(), "stdout")  # type: ignore[arg-type]
    assert guard(stream, "stdout") is stream  # type: ignore[arg-type]
    assert loss_of(io.StringIO()) is None
    assert loss_of(stream) is None


def test_the_front_end_goes_on_after_its_stderr_broke(broken_pipe: int) -> None:
    err = _text(broken_pipe)
    out = io.StringIO()
    front = Front(out, err, terminal=False)
    front.warn("first")
    front.info("second")
    front.notice("third")
    front.result("train: run r1 succeeded")  # stdout still works
    assert out.getvalue() == "train: run r1 succeeded\n"


def test_the_live_line_goes_silent_with_its_terminal() -> None:
    master, slave = os.openpty()
    err = _text(slave)
    front = Front(io.StringIO(), err, terminal=True)
    from tests.front.test_console import summary_at

    front.progress(summary_at(1))
    os.close(master)  # the terminal goes away while the live line shows
    front.progress(summary_at(2))
    front.warn("after the terminal went")
    front.progress_done(summary_at(10))
    front.close()


PIPE_HEAD = [
    # (command, exit code before, how stdout was lost) -> (exit code, error?)
    ("events", 0, None, 0, False),
    ("events", 0, Loss("stdout", "broken pipe"), 0, False),  # `| head`: no failure
    ("events", 0, Loss("stdout", "No space left on device"), 1, True),
    ("runs ls", 0, Loss("stdout", "closed"), 1, True),
    ("runs ls", 1, Loss("stdout", "closed"), 1, False),  # already failing: its own error
    ("config check", 0, Loss("stdout", "Input/output error"), 1, True),
    ("train", 0, Loss("stdout", "No space left on device"), 0, False),  # by its run
    ("train attach", 130, Loss("stdout", "closed"), 130, False),
    ("pod rm", 0, Loss("stdout", "Input/output error"), 0, False),
    ("train --help", 0, Loss("stdout", "closed"), 1, True),  # a help's product is its text
    ("", 0, Loss("stdout", "No space left on device"), 1, True),  # `overbrainer` alone
]


@pytest.mark.parametrize(("command", "code", "loss", "expected", "says"), PIPE_HEAD)
def test_exit_code_after_stdout_was_lost(
    command: str, code: int, loss: Loss | None, expected: int, says: bool
) -> None:
    got, problem = exit_code(command, code, loss)
    assert got == expected
    assert (problem is not None) == says
    if problem is not None:
        assert f"`{f'overbrainer {command}'.strip()}`" in problem
        assert loss is not None and loss.reason in problem


def test_python_flushing_at_exit_prints_nothing_once_guarded(tmp_path: Path) -> None:
    # What Python does after main(): flush sys.stdout, whose buffer still holds what the
    # broken pipe refused ("Exception ignored ... BrokenPipeError" and exit code 120).
    script = (
        "import sys\n"
        "from overbrainer.front import streams\n"
        "restore = streams.install()\n"
        "sys.stdout.write('x' * 200_000)\n"
        "restore()\n"
        "sys.stdout.write('after\\n')\n"
    )
    reader, writer = os.pipe()
    os.close(reader)
    done = subprocess.run(
        [sys.executable, "-c", script],
        stdout=writer,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    os.close(writer)
    assert done.returncode == 0
    assert done.stderr == b""


# A command's last words, from a process in a session of its own: with the terminal
# (``tty``) as its controlling one or none, its stdout and stderr the write end of a pipe
# (``pipe``) whose reader is gone or a file.
_LAST_WORDS = """
import fcntl, os, sys, termios
from overbrainer.front import streams
if sys.argv[1] == "tty":
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
streams.install()
streams.final_words("error: interrupted: run R keeps running on pod P")
"""


def _last_words(tmp_path: Path, *, controlling: bool, gone: bool) -> tuple[int, str, str]:
    """The exit code, what the terminal showed, and what the output file got."""
    master, slave = os.openpty()
    out_file = tmp_path / "out"
    reader, writer = os.pipe()
    if gone:
        os.close(reader)
        output = writer
    else:
        os.close(reader)
        os.close(writer)
        output = os.open(out_file, os.O_WRONLY | os.O_CREAT)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _LAST_WORDS, "tty" if controlling else "none"],
            stdin=slave,
            stdout=output,
            stderr=output,
            start_new_session=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(slave)
        os.close(output)
    shown = b""
    os.set_blocking(master, False)
    try:
        while chunk := os.read(master, 65536):
            shown += chunk
    except (BlockingIOError, OSError):
        pass
    os.close(master)
    written = out_file.read_text() if out_file.exists() else ""
    return done.returncode, shown.decode(errors="replace"), written


def test_last_words_whose_streams_are_gone_reach_the_controlling_terminal(
    tmp_path: Path,
) -> None:
    code, shown, _ = _last_words(tmp_path, controlling=True, gone=True)
    assert code == 0
    assert "error: interrupted: run R keeps running on pod P\r\n" in shown


def test_last_words_whose_stderr_works_go_there_and_not_to_the_terminal(tmp_path: Path) -> None:
    code, shown, written = _last_words(tmp_path, controlling=True, gone=False)
    assert code == 0
    assert written == "error: interrupted: run R keeps running on pod P\n"
    assert "keeps running" not in shown


def test_last_words_without_a_controlling_terminal_are_lost_quietly(tmp_path: Path) -> None:
    code, shown, _ = _last_words(tmp_path, controlling=False, gone=True)
    assert code == 0
    assert "keeps running" not in shown
