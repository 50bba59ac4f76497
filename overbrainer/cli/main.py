"""``main``: global options, error reporting and exit codes for every command."""

import sys
from collections.abc import Sequence
from pathlib import Path

from overbrainer.errors import OverbrainerError


def _split_global(argv: Sequence[str]) -> tuple[Path, list[str]]:
    """Take ``-C DIR`` (also ``-CDIR``, ``--project DIR``: ``spec.PROJECT``'s spellings) off
    the front of ``argv``."""
    from overbrainer.cli.spec import PROJECT

    name, short = PROJECT.name, PROJECT.short
    project = Path.cwd()
    rest = list(argv)
    while rest:
        head = rest[0]
        if head in PROJECT.names:
            if len(rest) < 2:
                raise _Usage(
                    f"{name} needs a directory: overbrainer {name} {PROJECT.metavar} COMMAND"
                )
            project = Path(rest[1])
            rest = rest[2:]
        elif short is not None and head.startswith(short) and len(head) > len(short):
            project = Path(head[len(short) :])
            rest = rest[1:]
        else:
            break
    return project, rest


class _Usage(Exception):
    pass


def command_name(tokens: Sequence[str], words: frozenset[str]) -> str:
    """The command the leading ``tokens`` name (``train stop``), for the actor of events."""
    names: list[str] = []
    for token in tokens:
        if token not in words:
            break
        names.append(token)
    return " ".join(names) or "overbrainer"


def _flatten(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in error.exceptions:
            found.extend(_flatten(inner))
        return found
    return [error]


def report(error: OverbrainerError) -> int:
    """Print ``error`` the way every command does and return its exit code (on the
    terminal itself when stdout and stderr are gone: ``front/streams.py``)."""
    from overbrainer.front.streams import final_words

    final_words(f"error: {error}")
    return error.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``overbrainer`` command line and return its exit code.

    stdout and stderr are guarded for the whole command (``overbrainer/front/streams.py``):
    output that cannot be written never aborts the command's work.
    """
    tokens = list(sys.argv[1:] if argv is None else argv)
    if tokens[:1] == ["__complete"]:
        # A shell asks at every Tab: answered before anything else is imported.
        from overbrainer.cli.completion import complete

        return complete(tokens[1:])
    from overbrainer.front import streams

    restore = streams.install()
    try:
        code = _main(tokens)
        sys.stdout.flush()  # whether the output arrived is known only once it is flushed
        try:
            _, rest = _split_global(tokens)
        except _Usage:
            return code
        code, problem = streams.exit_code(_asked(rest), code, streams.loss_of(sys.stdout))
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr, flush=True)
        return code
    finally:
        restore()


def _asked(rest: Sequence[str]) -> str:
    """What was asked of overbrainer, as ``"runs ls"`` (``"train --help"`` for a help)."""
    if not rest or any(token in ("--help", "-h", "--version") for token in rest):
        return " ".join(rest)
    from overbrainer.cli.command_words import COMMAND_WORDS

    name = command_name(rest, COMMAND_WORDS)
    return "" if name == "overbrainer" else name


def _main(tokens: list[str]) -> int:
    # The top-level help and version answer without importing the command tree: they must
    # stay fast (every shell completion and every newcomer starts here).
    if tokens in ([], ["--help"], ["-h"]):
        from overbrainer.cli.spec import top_help

        sys.stdout.write(top_help())
        return 0
    if tokens == ["--version"]:
        from overbrainer.version import describe

        sys.stdout.write(f"{describe()}\n")
        return 0
    if tokens[-1] in ("--help", "-h"):
        # So does every command's (overbrainer/cli/helps.py keeps what cyclopts renders).
        from overbrainer.cli.helps import kept_help

        try:
            _, rest = _split_global(tokens[:-1])
        except _Usage:
            rest = []
        text = kept_help(rest) if rest else None
        if text is not None:
            sys.stdout.write(text)
            return 0
    return _run(tokens)


def _run(tokens: list[str]) -> int:
    from overbrainer.cli.command_words import COMMAND_WORDS
    from overbrainer.cli.context import Invocation, set_current
    from overbrainer.cli.fast_path import parse
    from overbrainer.config.project import find_project

    try:
        start, rest = _split_global(tokens)
    except _Usage as usage:
        print(f"error: {usage}", file=sys.stderr)
        return 2
    # The project is found as git finds a repository: here or in the nearest directory
    # above. Where there is none, commands that need one say so, naming where they looked.
    set_current(
        Invocation(
            project_dir=find_project(start) or start,
            start_dir=start,
            command=command_name(rest, COMMAND_WORDS),
            argv=tuple(tokens),
        )
    )
    # The most frequent read commands, in the forms parse() fully understands, start
    # without cyclopts; every other command line goes through it.
    fast = parse(rest)
    try:
        result = fast.run() if fast is not None else _through_cyclopts(rest)
    except SystemExit as leaving:
        return leaving.code if isinstance(leaving.code, int) else 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except OverbrainerError as error:
        return report(_explained(error))
    except BaseExceptionGroup as group:
        inner = _flatten(group)
        known = [e for e in inner if isinstance(e, OverbrainerError)]
        if known and len(known) == len(inner):
            return report(_explained(known[0]))
        if inner and all(isinstance(e, KeyboardInterrupt) for e in inner):
            print("error: interrupted", file=sys.stderr)
            return 130
        raise
    return result if isinstance(result, int) else 0


def _explained(error: OverbrainerError) -> OverbrainerError:
    """``error``, or for a run the log does not hold, what the project's ``runs/`` tells of
    it (a log emptied or replaced): looked at only once a command failed so."""
    from overbrainer.events.errors import UnknownRun

    if not isinstance(error, UnknownRun):
        return error
    from overbrainer.cli.context import current
    from overbrainer.cli.unlogged import explained

    return explained(current(), error)


def _through_cyclopts(rest: list[str]) -> object:
    """The command ``rest`` names, parsed and called by cyclopts; a command line it refuses
    is a usage error (exit code 2)."""
    from cyclopts import CycloptsError

    from overbrainer.cli.app import app

    try:
        return app(rest, exit_on_error=False, print_error=False, result_action="return_value")
    except CycloptsError as refused:
        from overbrainer.cli.usage import usage_text

        print(f"error: {usage_text(refused, rest)}", file=sys.stderr)
        return 2
