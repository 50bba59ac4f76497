"""A command line cyclopts refused, told as every other error is: one ``error: …`` line
naming what is wrong and how to see what the command takes."""

from typing import Any


def usage_text(error: Any) -> str:
    """The message for a ``CycloptsError`` (exit code 2): what is wrong, and the help
    command to read."""
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
    text = str(error).strip().rstrip(".")
    text = text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text
    text = " ".join(text.split())
    first, maybe, suggestion = text.partition(". Did you mean ")
    if maybe:
        text = f"{first} (did you mean {suggestion.rstrip('?')}?)"
    text = text.replace(". Available commands:", "; the commands are")
    return f"{text}; see `{command} --help`"
