"""Reading a project's ``.env``: ``KEY=VALUE`` lines, loaded under the process environment.

Accepted: blank lines, ``# comments``, an optional ``export`` prefix, unquoted values (an
inline comment starts at `` #``), ``'single'`` quoted values taken literally and
``"double"`` quoted values with the escapes ``\\n``, ``\\t``, ``\\"``, ``\\\\`` and ``\\$``.
A line that is none of these is reported by its number only: it may hold a secret.
"""

import re
from pathlib import Path
from typing import NoReturn

_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}


class _BadLine(Exception):
    """The reason a line cannot be read; never carries the line's text."""


def read_dotenv(path: Path) -> dict[str, str]:
    """The variables ``path`` sets (a missing file sets none).

    Raises :class:`overbrainer.config.load.ConfigError` listing every line that is not
    ``KEY=VALUE``, by file and line number, never by content.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as error:
        _fail([f"{path}: cannot be read ({error.strerror or type(error).__name__})"])
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        _fail([f"{path}: is not UTF-8 text; save it as UTF-8"])
    values: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            parsed = _parse_line(line)
        except _BadLine as bad:
            problems.append(f"{path}: line {number}: {bad}; write it as KEY=VALUE")
            continue
        if parsed is not None:
            values[parsed[0]] = parsed[1]
    if problems:
        _fail(problems)
    return values


def _fail(problems: list[str]) -> NoReturn:
    # Imported here so that reading a .env does not import pydantic.
    from overbrainer.config.model import ConfigError

    raise ConfigError(problems)


def _parse_line(line: str) -> tuple[str, str] | None:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    if stripped.startswith("export") and stripped[6:7] in (" ", "\t"):
        stripped = stripped[6:].lstrip()
    key, equals, rest = stripped.partition("=")
    key = key.rstrip()
    if not equals:
        raise _BadLine("has no '='")
    if _KEY_RE.fullmatch(key) is None:
        raise _BadLine("the name before '=' is not a variable name (letters, digits, _)")
    return key, _parse_value(rest.lstrip())


def _parse_value(rest: str) -> str:
    if rest.startswith("'"):
        end = rest.find("'", 1)
        if end < 0:
            raise _BadLine("a single quote is not closed on the same line")
        _expect_end(rest[end + 1 :])
        return rest[1:end]
    if rest.startswith('"'):
        out: list[str] = []
        index = 1
        while index < len(rest):
            char = rest[index]
            if char == "\\" and index + 1 < len(rest):
                following = rest[index + 1]
                out.append(_ESCAPES.get(following, "\\" + following))
                index += 2
                continue
            if char == '"':
                _expect_end(rest[index + 1 :])
                return "".join(out)
            out.append(char)
            index += 1
        raise _BadLine("a double quote is not closed on the same line")
    comment = re.search(r"\s#", rest)
    value = rest[: comment.start()] if comment else rest
    value = value.rstrip()
    if any(quote in value for quote in "\"'"):
        raise _BadLine("an unquoted value has a quote in it; quote the whole value")
    return value


def _expect_end(tail: str) -> None:
    tail = tail.strip()
    if tail and not tail.startswith("#"):
        raise _BadLine("there is text after the closing quote")
