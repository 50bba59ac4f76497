"""``read_dotenv``: what a ``.env`` line means, and errors that name lines, not contents."""

from pathlib import Path

import pytest

from overbrainer.config.dotenv import read_dotenv
from overbrainer.config.load import ConfigError

CANARY = "CANARY-51c0-never-print"


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / ".env"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_missing_file_sets_nothing(tmp_path: Path) -> None:
    assert read_dotenv(tmp_path / ".env") == {}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("A=1", {"A": "1"}),
        ("A = 1 ", {"A": "1"}),
        ("export A=1", {"A": "1"}),
        ("export\tA=1", {"A": "1"}),
        ("exportA=1", {"exportA": "1"}),
        ("A=", {"A": ""}),
        ("A=x=y", {"A": "x=y"}),
        ("A=value # a comment", {"A": "value"}),
        ("A=value#not-a-comment", {"A": "value#not-a-comment"}),
        ("A='single $HOME \\n # kept'", {"A": "single $HOME \\n # kept"}),
        ('A="double \\"q\\" \\n \\\\ \\$x"', {"A": 'double "q" \n \\ $x'}),
        ('A="a # b"  # comment', {"A": "a # b"}),
        ("A=''", {"A": ""}),
        ("  # a comment", {}),
        ("", {}),
        ("_A9=ok", {"_A9": "ok"}),
    ],
)
def test_lines(tmp_path: Path, line: str, expected: dict[str, str]) -> None:
    assert read_dotenv(write(tmp_path, line + "\n")) == expected


def test_later_lines_win_and_bom_and_crlf(tmp_path: Path) -> None:
    path = write(tmp_path, "\ufeffA=1\r\nB=2\r\nA=3\r\n".encode())
    assert read_dotenv(path) == {"A": "3", "B": "2"}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (CANARY, "has no '='"),
        (f"{CANARY} =x", "not a variable name"),
        (f"9X={CANARY}", "not a variable name"),
        (f"A-B={CANARY}", "not a variable name"),
        (f'A="{CANARY}', "double quote is not closed"),
        (f"A='{CANARY}", "single quote is not closed"),
        (f'A="{CANARY}" trailing', "text after the closing quote"),
        (f"A=it's-{CANARY}", "quote in it"),
    ],
)
def test_bad_line_is_named_by_number_never_by_content(
    tmp_path: Path, line: str, reason: str
) -> None:
    path = write(tmp_path, f"# first\nOK=1\n\n{line}\n")
    with pytest.raises(ConfigError) as caught:
        read_dotenv(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: line 4: ")
    assert reason in message
    assert CANARY not in message
    assert caught.value.problems == [message]


def test_every_bad_line_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path, f"{CANARY}\nA=1\n{CANARY}2\n")
    with pytest.raises(ConfigError) as caught:
        read_dotenv(path)
    assert [problem.split(": ")[1] for problem in caught.value.problems] == ["line 1", "line 3"]
    assert CANARY not in str(caught.value)


def test_not_utf8(tmp_path: Path) -> None:
    path = write(tmp_path, b"A=\xff\xfe" + CANARY.encode())
    with pytest.raises(ConfigError, match="is not UTF-8 text") as caught:
        read_dotenv(path)
    assert CANARY not in str(caught.value)


def test_a_directory_cannot_be_read(tmp_path: Path) -> None:
    (tmp_path / ".env").mkdir()
    with pytest.raises(ConfigError, match="cannot be read"):
        read_dotenv(tmp_path / ".env")
