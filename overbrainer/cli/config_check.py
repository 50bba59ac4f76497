"""``overbrainer config check``: the resolved configuration, or every problem at once.

Kept free of cyclopts: the command line reaches it through ``overbrainer/cli/fast_path.py``
without building the command tree, and the command declared in ``config_cmd.py`` calls it
too.
"""

import json as _json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from overbrainer.config.model import Settings

_SQLITE_DEFAULT = "(default: SQLite at .overbrainer/events.sqlite)"


def check_config(*, json: bool = False) -> int:
    """``config check``: the settings with secrets masked, or every problem (exit code 1)."""
    from overbrainer.cli.context import current
    from overbrainer.config.load import ConfigError, load_resolved, masked

    invocation = current()
    problems: list[str] = []
    try:
        environ: Mapping[str, str] = invocation.environ()
    except ConfigError as error:
        # A broken .env is one more problem; the file is still checked against the rest.
        problems.extend(error.problems)
        environ = dict(invocation.base_environ)
    resolved = None
    try:
        resolved = load_resolved(invocation.project_dir, environ)
    except ConfigError as error:
        problems.extend(error.problems)
    if problems or resolved is None:
        if json:
            print(_json.dumps({"ok": False, "problems": problems}))
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1

    settings = resolved.settings
    warnings = _warnings(settings)
    data = _shown(masked(settings))
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if json:
        print(
            _json.dumps(
                {
                    "ok": True,
                    "config_file": str(resolved.path),
                    "settings": data,
                    "from_environment": dict(resolved.sources),
                    "settings_digest": settings.settings_digest(),
                    "warnings": warnings,
                }
            )
        )
        return 0
    print(f"# {resolved.path}: ok (secrets masked; digest {settings.settings_digest()[:12]})")
    print(_render(data, resolved.sources), end="")
    return 0


# Keys of a local or ssh target that only the docker runtime reads.
_DOCKER_ONLY = ("engine", "image", "allow_unpinned_image")


def _shown(data: dict[str, Any]) -> dict[str, Any]:
    """The settings as shown: a native target without the keys only docker reads (a
    default ``engine = "docker"`` there would suggest docker is used)."""
    for target in data["targets"].values():
        if target.get("runtime") == "native":  # only a machine target has a runtime
            for key in _DOCKER_ONLY:
                target.pop(key, None)
    return data


def _warnings(settings: "Settings") -> list[str]:
    return [
        warning
        for name, target in settings.targets.items()
        for warning in target.unset_for_training(name, settings)
    ]


def _render(data: dict[str, Any], sources: Mapping[str, str]) -> str:
    lines: list[str] = []

    def table(header: str, values: dict[str, Any], prefix: str) -> None:
        lines.append(f"[{header}]")
        nested: list[tuple[str, dict[str, Any]]] = []
        for key, value in values.items():
            if isinstance(value, dict) and value:
                nested.append((key, value))
                continue
            lines.append(_line(key, value, sources.get(f"{prefix}{key}")))
        for key, value in nested:
            lines.append("")
            table(f"{header}.{key}", value, f"{prefix}{key}.")
        lines.append("")

    table("training", data["training"], "training.")
    for name, target in data["targets"].items():
        table(f"targets.{name}", target, f"targets.{name}.")
    table("project", data["project"], "project.")
    table("store", data["store"], "store.")
    table("runpod", data["runpod"], "runpod.")
    lines.append(_line("hf_token", data["hf_token"], sources.get("hf_token")))
    return "\n".join(lines) + "\n"


def _line(key: str, value: Any, source: str | None) -> str:
    if value is None:
        shown = _SQLITE_DEFAULT if key == "url" else "(not set)"
    elif value == {}:
        shown = "{}"
    else:
        shown = _json.dumps(value, ensure_ascii=False)
    note = f"  # from {source}" if source else ""
    return f"{key} = {shown}{note}"
