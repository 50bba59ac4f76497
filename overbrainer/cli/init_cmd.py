"""``overbrainer init [DIR]``: start a project with commented settings and example data."""

import shlex
import sys
from pathlib import Path

from overbrainer.errors import OverbrainerError

# Lines of a .gitignore that keep .env out of git.
_IGNORES_ENV = {".env", "/.env", ".env*", "/.env*", "*.env"}


def init(directory: Path | None = None) -> int:
    """Write overbrainer.toml, .env.example, .gitignore and data/ into DIR.

    Never overwrites a file that exists: it is kept as it is.

    Parameters
    ----------
    directory
        The project directory (default: the one given with -C, else the current one).
        A relative DIR is taken relative to the -C directory.
    """
    from overbrainer.cli.context import current
    from overbrainer.config.project import enclosing_project, reached_from_cwd
    from overbrainer.config.template import project_files

    base = current().started_in
    project = base if directory is None else base / directory
    enclosing = enclosing_project(project)
    if enclosing is not None:
        # Commands find the nearest project upward: a project nested in another would take
        # over every command run below it, its runs apart from the outer one's.
        raise OverbrainerError(
            f"{project} is inside the overbrainer project {enclosing}, so init made no "
            f"project there; use that one (every command finds it from any directory "
            f"inside it), or init a directory outside it"
        )
    if project.exists() and not project.is_dir():
        raise OverbrainerError(f"{project} is a file, not a directory; name a directory to init")
    try:
        project.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OverbrainerError(
            f"cannot create {project} ({error.strerror or type(error).__name__}); "
            "name a directory you can write to"
        ) from None
    wrote: list[str] = []
    kept: list[str] = []
    for relative, content in project_files().items():
        path = project / relative
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # "x" never replaces a file, even one created since we looked.
            with path.open("x", encoding="utf-8", newline="\n") as handle:
                handle.write(content)
        except FileExistsError:
            kept.append(relative)
            continue
        except OSError as error:
            raise OverbrainerError(
                f"cannot write {path} ({error.strerror or type(error).__name__}); "
                f"wrote so far: {', '.join(wrote) or 'nothing'}"
            ) from None
        wrote.append(relative)
    for relative in wrote:
        print(f"wrote {project / relative}")
    for relative in kept:
        print(f"kept {project / relative} (it exists; not overwritten)")
    if ".gitignore" in kept and not _ignores_env(project / ".gitignore"):
        print(
            f"warning: {project / '.gitignore'} does not list .env; add a line `.env` so "
            "secrets stay out of git",
            file=sys.stderr,
        )
    prefix = (
        "overbrainer"
        if reached_from_cwd(project)
        else (f"overbrainer -C {shlex.quote(str(project))}")
    )
    print(
        f"next: put your examples in {project / 'data' / 'train.jsonl'} (and optionally "
        f"data/eval.jsonl), copy .env.example to .env for secrets, then run: "
        f"{prefix} config check"
    )
    return 0


def _ignores_env(path: Path) -> bool:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return True  # cannot tell; say nothing rather than guess
    return any(line.strip() in _IGNORES_ENV for line in lines)
