"""A command line cyclopts refused, told as every other error is: one ``error: …`` line
naming what is wrong and how to see what the command takes."""

import re
from collections.abc import Sequence
from typing import Any

from overbrainer.cli import spec


def _project() -> tuple[str, str, str]:
    """The spellings of the option that goes before a command (``spec.PROJECT``): its name,
    the one a value joins (``-CDIR``) and the one ``=VALUE`` follows (``--project=DIR``)."""
    option = spec.PROJECT
    return option.name, option.short or option.name, option.long or option.name


def usage_text(error: Any, argv: Sequence[str] = ()) -> str:
    """The message for a ``CycloptsError`` (exit code 2): what is wrong, and the help
    command to read (``argv``: the whole command line, to show one put right)."""
    chain = " ".join(getattr(error, "command_chain", None) or ())
    command = f"overbrainer {chain}".strip()
    kind = type(error).__name__
    argument = getattr(error, "argument", None)
    if kind == "MissingArgumentError" and argument is not None:
        name = str(argument.name)
        what = name if name.isupper() else f"a value for {name}"
        return f"`{command}` needs {what}; see `{command} --help`"
    if kind == "UnusedCliTokensError":
        extra = " ".join(str(token) for token in getattr(error, "unused_tokens", ()) or ())
        unexpected = f" {extra!r}" if extra else ""
        return f"`{command}` takes no further argument{unexpected}; see `{command} --help`"
    option = _offending_option(error, kind)
    if option is not None and _is_global(option):
        return _global_after_command(option, argv, command)
    if option is not None and kind == "UnknownCommandError":
        # An option where a command's name goes (``overbrainer --versoin``): no command.
        return f"unknown option: {option}{_close(option, chain)}; see `{command} --help`"
    text = str(error).strip().rstrip(".")
    text = text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text
    text = " ".join(text.split())
    text = re.sub(r"([.?]) Available commands:", _commands_are, text)
    text = re.sub(r"\. Did you mean (.+?)\?", r" (did you mean \1?)", text)
    return f"{text}; see `{command} --help`"


def _commands_are(match: "re.Match[str]") -> str:
    return ("?" if match.group(1) == "?" else "") + "; the commands are"


def _offending_option(error: Any, kind: str) -> str | None:
    """The option-like word cyclopts did not know, if that is what it refused."""
    if kind == "UnknownOptionError":
        token = getattr(error, "token", None)
        value = getattr(token, "keyword", None) or getattr(token, "value", None)
        return str(value) if value else None
    if kind == "UnknownCommandError":
        unused = getattr(error, "unused_tokens", None) or ()
        if unused and str(unused[0]).startswith("-"):
            return str(unused[0])
    return None


def _is_global(option: str) -> bool:
    _, short, long = _project()
    return option in spec.PROJECT.names or option.startswith((f"{long}=", short))


def _global_after_command(option: str, argv: Sequence[str], command: str) -> str:
    """``-C DIR`` given after the command: say where it goes, with the command line put
    right when it is known."""
    import shlex

    words = list(argv)
    rest_of = command.removeprefix("overbrainer").strip()
    first, short, long = _project()
    metavar = spec.PROJECT.metavar
    fixed = f"overbrainer {first} {metavar} {rest_of} …"
    name = long if option.startswith(long) else short
    at = next((i for i, w in enumerate(words) if w.startswith(name) and _is_global(w)), None)
    if at is not None:
        word = words[at]
        if word in spec.PROJECT.names:
            given = words[at + 1 : at + 2]
            rest = words[:at] + words[at + 2 :]
        else:
            given = [word.removeprefix(f"{long}=").removeprefix(short)]
            rest = words[:at] + words[at + 1 :]
        if given and given[0]:
            fixed = shlex.join(["overbrainer", first, given[0], *rest])
    return f"{name} {metavar} goes before the command: `{fixed}`"


def _close(option: str, chain: str) -> str:
    import difflib

    # At the top, the global options' long spellings; below it, the --help every command has.
    top = [option.long for option in spec.GLOBAL_OPTIONS if option.long is not None]
    known = top if not chain else [spec.HELP.name]
    close = difflib.get_close_matches(option, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
