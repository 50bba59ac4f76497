"""Resolving the settings: defaults, then ``overbrainer.toml``, then ``OVERBRAINER_*`` variables.

Environment variables name a setting as ``OVERBRAINER_<SECTION>__<KEY>``
(``OVERBRAINER_TRAINING__EPOCHS``), ``OVERBRAINER_TARGETS__<NAME>__<KEY>`` for a target
declared in the file, and ``OVERBRAINER_HF_TOKEN``. Names are case-insensitive. A value is
read as its setting's type: whole numbers, numbers, booleans (true/false, 1/0, yes/no, on/off),
lists as one comma-separated string, ``axolotl_extra`` as a JSON object. An empty value
counts as unset (so a copy of ``.env.example`` changes nothing).

Secrets (``OVERBRAINER_RUNPOD__API_KEY``, ``OVERBRAINER_HF_TOKEN``, the network volumes'
S3 API key ``OVERBRAINER_RUNPOD__S3_ACCESS_KEY`` and ``__S3_SECRET``) and SSH hosts
(``OVERBRAINER_TARGETS__<NAME>__HOST``) come from the environment only, and a store URL
in the file may not carry a password. Any other ``OVERBRAINER_*`` variable that names no
setting is an error, except the few in :data:`NON_CONFIG_ENV`, which other parts of
overbrainer use for their own purposes.

Every problem found, in the file and in the environment, is reported at once in one
:class:`ConfigError`, each naming its key and never a value.
"""

import difflib
import json
import shlex
import tomllib
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_core import ErrorDetails

from overbrainer.config.model import (
    TARGET_NAME_RE,
    ConfigError,
    LocalTarget,
    ProjectSettings,
    RunpodOnly,
    RunpodSettings,
    RunpodTarget,
    Settings,
    SshTarget,
    StoreSettings,
    TrainingSettings,
    store_url_has_password,
    strip_url_password,
    undeclared_target,
)
from overbrainer.config.project import not_a_project, reached_from_cwd
from overbrainer.config.template import BASE_MODEL

__all__ = [
    "CONFIG_FILE",
    "ENV_PREFIX",
    "NON_CONFIG_ENV",
    "ConfigError",
    "Resolved",
    "load_resolved",
    "load_runpod_environment",
    "load_settings",
    "masked",
]

CONFIG_FILE = "overbrainer.toml"
ENV_PREFIX = "OVERBRAINER_"

# OVERBRAINER_* variables that are not settings, so not refused as unknown:
# OVERBRAINER_METRICS is where the metrics plugin writes inside a job, OVERBRAINER_STOP
# where it looks for a save-and-stop request (train/overbrainer_metrics.py);
# OVERBRAINER_FAULT_PLAN is the reliability campaigns' plan (front/fault_injection.py).
NON_CONFIG_ENV = frozenset({"OVERBRAINER_METRICS", "OVERBRAINER_STOP", "OVERBRAINER_FAULT_PLAN"})

MASK = "****"

_SECTIONS: dict[str, type[BaseModel]] = {
    "training": TrainingSettings,
    "project": ProjectSettings,
    "store": StoreSettings,
    "runpod": RunpodSettings,
}
_KINDS: dict[str, type[BaseModel]] = {
    "local": LocalTarget,
    "ssh": SshTarget,
    "runpod": RunpodTarget,
}
# Settings that are read from the environment only, by path.
_ENV_ONLY = {
    ("hf_token",),
    ("runpod", "api_key"),
    ("runpod", "s3_access_key"),
    ("runpod", "s3_secret"),
}
# Keys that look like a secret wherever they appear in the file, and where they belong.
_SECRET_NAMES = {
    "api_key": "OVERBRAINER_RUNPOD__API_KEY",
    "hf_token": "OVERBRAINER_HF_TOKEN",
    "s3_access_key": "OVERBRAINER_RUNPOD__S3_ACCESS_KEY",
    "s3_secret": "OVERBRAINER_RUNPOD__S3_SECRET",
}
_EXAMPLES = {
    "target": '"local"',
    "base_model": f'"{BASE_MODEL}"',
    "adapter": '"lora"',
    "gpu_types": '["NVIDIA GeForce RTX 4090"]',
    "max_hours": "4",
    "image": '"name@sha256:<64 hex digits>"',
}

_KeyPath = tuple[str, ...]


@dataclass(frozen=True)
class Resolved:
    """The settings and where each environment override came from."""

    settings: Settings
    path: Path
    # Dotted key (``training.epochs``) -> the environment variable that set it.
    sources: Mapping[str, str]


def load_settings(project_dir: Path, environ: Mapping[str, str]) -> Settings:
    """The project's settings: ``overbrainer.toml`` under ``environ``'s ``OVERBRAINER_*``.

    ``environ`` is normally ``overbrainer.cli.context.current().environ()`` (the process
    environment over the project's ``.env``). Raises :class:`ConfigError` listing every
    problem.
    """
    return load_resolved(project_dir, environ).settings


def load_resolved(project_dir: Path, environ: Mapping[str, str]) -> Resolved:
    """Like :func:`load_settings`, also telling which keys the environment set."""
    path = project_dir / CONFIG_FILE
    raw = _read_file(path, project_dir)
    problems: list[str] = []
    data = _screen_file(raw, problems)
    sources: dict[_KeyPath, str] = {}
    _apply_env(data, environ, problems, sources)
    _check_declared(data, problems, sources)
    settings: Settings | None = None
    try:
        settings = Settings.model_validate(data)
    except ValidationError as error:
        problems.extend(_explain(error, sources))
    problems = list(dict.fromkeys(problems))
    if problems or settings is None:
        raise ConfigError(
            problems, hint=f"check them all with: {_command(project_dir, 'config check')}"
        )
    return Resolved(
        settings=settings,
        path=path,
        sources={".".join(key): name for key, name in sorted(sources.items())},
    )


def load_runpod_environment(environ: Mapping[str, str]) -> RunpodSettings:
    """``[runpod]`` from ``OVERBRAINER_RUNPOD__*`` alone, for a command that works outside a
    project (Runpod's catalog); other variables are left alone (they belong to projects).
    Raises :class:`ConfigError` for a value the settings refuse."""
    prefix = f"{ENV_PREFIX}RUNPOD__"
    data: dict[str, Any] = {}
    problems: list[str] = []
    sources: dict[_KeyPath, str] = {}
    _apply_env(
        data, {k: v for k, v in environ.items() if k.upper().startswith(prefix)}, problems, sources
    )
    found: RunpodOnly | None = None
    try:
        found = RunpodOnly.model_validate(data)
    except ValidationError as error:
        problems.extend(_explain(error, sources))
    if problems or found is None:
        raise ConfigError(list(dict.fromkeys(problems)))
    return found.runpod


def masked(settings: Settings) -> dict[str, Any]:
    """The resolved settings as JSON-able data, each secret shown as ``"****"`` when set and
    ``None`` when not (a password in the store URL too)."""
    data = settings.model_dump(mode="json")
    data["hf_token"] = MASK if settings.hf_token is not None else None
    for key in ("api_key", "s3_access_key", "s3_secret"):
        data["runpod"][key] = MASK if getattr(settings.runpod, key) is not None else None
    if settings.store.url is not None:
        data["store"]["url"] = strip_url_password(settings.store.url, MASK)
    data["targets"] = {
        name: {"kind": target["kind"], **{k: v for k, v in target.items() if k != "kind"}}
        for name, target in data["targets"].items()
    }
    return data


# --- the file --------------------------------------------------------------------------


def _command(project_dir: Path, words: str) -> str:
    if reached_from_cwd(project_dir):
        return f"overbrainer {words}"
    return f"overbrainer -C {shlex.quote(str(project_dir))} {words}"


def _read_file(path: Path, project_dir: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError([not_a_project(project_dir)]) from None
    except OSError as error:
        raise ConfigError(
            [f"{path}: cannot be read ({error.strerror or type(error).__name__})"]
        ) from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: is not UTF-8 text; save it as UTF-8"]) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError([f"{path}: is not valid TOML: {error}; fix that line"]) from None


def _screen_file(raw: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """A copy of the file's tables without the keys it may not hold, each one reported."""
    data: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "hf_token":
            problems.append(_secret_in_file("hf_token", "OVERBRAINER_HF_TOKEN"))
        elif key in _SECTIONS and isinstance(value, dict):
            data[key] = dict(value)
        elif key == "targets" and isinstance(value, dict):
            data[key] = {
                name: dict(table) if isinstance(table, dict) else table
                for name, table in value.items()
            }
        else:
            data[key] = value  # wrong types and unknown keys: the model reports them
    runpod = data.get("runpod")
    for key in ("api_key", "s3_access_key", "s3_secret"):
        if isinstance(runpod, dict) and key in runpod:
            del runpod[key]
            problems.append(_secret_in_file(f"runpod.{key}", _SECRET_NAMES[key]))
    store = data.get("store")
    url = store.get("url") if isinstance(store, dict) else None
    if isinstance(store, dict) and isinstance(url, str) and store_url_has_password(url):
        del store["url"]
        problems.append(
            "store.url: has a password, which overbrainer.toml may not hold; remove it "
            "from the URL and put it in libpq's password file (~/.pgpass), or set the "
            "whole URL in OVERBRAINER_STORE__URL"
        )
    targets = data.get("targets")
    if isinstance(targets, dict):
        for name in list(targets):
            if TARGET_NAME_RE.fullmatch(name) is None:
                del targets[name]
                problems.append(
                    f"targets.{name}: is not a valid target name: use lowercase letters, "
                    f"digits and _ only (rename [targets.{name}])"
                )
                continue
            table = targets[name]
            if isinstance(table, dict) and "host" in table:
                del table["host"]
                problems.append(
                    f"targets.{name}.host: a host is never read from overbrainer.toml; remove "
                    f"it and set OVERBRAINER_TARGETS__{name.upper()}__HOST=user@host[:port] "
                    "in the environment or in .env"
                )
    return data


def _check_declared(
    data: dict[str, Any], problems: list[str], sources: dict[_KeyPath, str]
) -> None:
    """Report ``training.target`` naming no target even when other problems stop the model
    before its own cross-check (the model's duplicate is dropped)."""
    training, targets = data.get("training"), data.get("targets")
    wanted = training.get("target") if isinstance(training, dict) else None
    if isinstance(wanted, str) and isinstance(targets, dict) and wanted not in targets:
        source = sources.get(("training", "target"))
        problems.append(_format("training.target", undeclared_target(wanted, targets), source))


def _format(key: str, rule: str, source: str | None) -> str:
    return f"{key} (from {source}): {rule}" if source else f"{key}: {rule}"


def _secret_in_file(key: str, variable: str) -> str:
    return (
        f"{key}: a secret is never read from overbrainer.toml; remove it from the file "
        f"(and rotate it if the file was shared) and set {variable} in the environment or "
        "in .env"
    )


# --- the environment -------------------------------------------------------------------


@dataclass(frozen=True)
class _Override:
    variable: str
    path: _KeyPath
    annotation: Any
    text: str


def _apply_env(
    data: dict[str, Any],
    environ: Mapping[str, str],
    problems: list[str],
    sources: dict[_KeyPath, str],
) -> None:
    kinds = _target_kinds(data, environ)
    overrides: list[_Override] = []
    seen: dict[_KeyPath, str] = {}
    for variable in sorted(environ):
        if not variable.upper().startswith(ENV_PREFIX) or variable.upper() in NON_CONFIG_ENV:
            continue
        found = _resolve_variable(variable, kinds, problems)
        if found is None:
            continue
        path, annotation = found
        if path in seen:
            problems.append(
                f"{variable}: sets the same setting as {seen[path]} (names are "
                "case-insensitive); keep one of them"
            )
            continue
        seen[path] = variable
        text = environ[variable]
        if text == "":
            continue  # an empty value counts as unset
        overrides.append(_Override(variable, path, annotation, text))
    for override in overrides:
        try:
            value = _coerce(override.annotation, override.text)
        except ValueError as error:
            problems.append(f"{'.'.join(override.path)} (from {override.variable}): {error}")
            continue
        if not _set(data, override.path, value):
            continue  # the table is not a table in the file: the model reports that
        sources[override.path] = override.variable


def _target_kinds(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, object]:
    """Each declared target's kind, as the environment leaves it."""
    targets = data.get("targets")
    if not isinstance(targets, dict):
        return {}
    kinds: dict[str, object] = {
        name: table.get("kind") if isinstance(table, dict) else None
        for name, table in targets.items()
    }
    for variable, text in environ.items():
        parts = variable[len(ENV_PREFIX) :].lower().split("__")
        is_kind = variable.upper().startswith(ENV_PREFIX) and len(parts) == 3
        if is_kind and parts[0] == "targets" and parts[2] == "kind" and parts[1] in kinds and text:
            kinds[parts[1]] = text
    return kinds


def _resolve_variable(
    variable: str, kinds: dict[str, object], problems: list[str]
) -> tuple[_KeyPath, Any] | None:
    """The setting ``variable`` names and its type; None (with a problem) if none."""
    parts = variable[len(ENV_PREFIX) :].lower().split("__")
    if parts == ["hf_token"]:
        return ("hf_token",), Settings.model_fields["hf_token"].annotation
    if len(parts) == 2 and parts[0] in _SECTIONS:
        fields = _SECTIONS[parts[0]].model_fields
        if parts[1] in fields:
            return (parts[0], parts[1]), fields[parts[1]].annotation
    if len(parts) == 3 and parts[0] == "targets" and parts[1] in kinds:
        name, key = parts[1], parts[2]
        kind = kinds[name]
        model = _KINDS.get(kind) if isinstance(kind, str) else None
        if key == "host" and model is not None and model is not SshTarget:
            problems.append(
                f"{variable}: target {name} is a {kind} target and only an ssh target has a "
                "host; remove the variable"
            )
            return None
        candidates = [model] if model is not None else list(_KINDS.values())
        for candidate in candidates:
            if key in candidate.model_fields:
                return ("targets", name, key), candidate.model_fields[key].annotation
        problems.append(
            f"{variable}: {key} is not a setting of target {name}"
            + (f" (a {kind} target)" if model is not None else "")
            + _suggest(variable, _known_variables(kinds))
            + "; remove the variable"
        )
        return None
    if len(parts) == 3 and parts[0] == "targets" and parts[1] not in kinds:
        known = ", ".join(sorted(kinds)) or "none"
        problems.append(
            f"{variable}: names target {parts[1]!r}, which overbrainer.toml does not declare "
            f"(declared: {known}); declare [targets.{parts[1]}] with its kind, or remove the "
            "variable"
        )
        return None
    problems.append(
        f"{variable}: is not an overbrainer setting"
        + _suggest(variable, _known_variables(kinds))
        + "; settings are OVERBRAINER_<SECTION>__<KEY> (e.g. OVERBRAINER_TRAINING__EPOCHS) "
        "or OVERBRAINER_TARGETS__<NAME>__<KEY>; remove or rename the variable"
    )
    return None


def _known_variables(kinds: dict[str, object]) -> list[str]:
    names = [f"{ENV_PREFIX}HF_TOKEN"]
    for section, model in _SECTIONS.items():
        names.extend(f"{ENV_PREFIX}{section}__{key}".upper() for key in model.model_fields)
    for name, kind in kinds.items():
        chosen = _KINDS.get(kind) if isinstance(kind, str) else None
        for candidate in [chosen] if chosen is not None else list(_KINDS.values()):
            names.extend(
                f"{ENV_PREFIX}TARGETS__{name}__{key}".upper() for key in candidate.model_fields
            )
    return names


def _suggest(name: str, known: list[str]) -> str:
    # Compared without the prefix every name shares, which would make all names look close.
    bare = {known_name[len(ENV_PREFIX) :]: known_name for known_name in known}
    close = difflib.get_close_matches(name.upper()[len(ENV_PREFIX) :], bare, n=1, cutoff=0.8)
    return f" (did you mean {bare[close[0]]}?)" if close else ""


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _coerce(annotation: Any, text: str) -> object:
    """``text`` read as ``annotation``; ``ValueError`` (without the text) if it is not one."""
    kind = _base_type(annotation)
    stripped = text.strip()
    if _is_list_or_auto(annotation):
        return "auto" if stripped == "auto" else _coerce(list[str], text)
    if kind is bool:
        if stripped.lower() in _TRUE:
            return True
        if stripped.lower() in _FALSE:
            return False
        raise ValueError("must be true or false (or 1/0, yes/no, on/off)")
    if kind is int:
        try:
            return int(stripped, 10)
        except ValueError:
            raise ValueError("must be a whole number") from None
    if kind is float:
        try:
            return float(stripped)
        except ValueError:
            raise ValueError("must be a number") from None
    if kind is list:
        return [item.strip() for item in text.split(",") if item.strip()]
    if kind is dict:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise ValueError('must be a JSON object, e.g. {"chat_template": "chatml"}')
        return value
    return text  # strings, literals and secrets are validated by the model


def _is_list_or_auto(annotation: Any) -> bool:
    """``gpu_types``' type: a list, or the word ``auto``."""
    if get_origin(annotation) not in (Union, types.UnionType):
        return False
    options = [
        get_args(arg)[0] if get_origin(arg) is Annotated else arg for arg in get_args(annotation)
    ]
    origins = {get_origin(option) for option in options}
    return origins == {list, Literal}


def _base_type(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _base_type(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        options = [arg for arg in get_args(annotation) if arg is not type(None)]
        return _base_type(options[0]) if len(options) == 1 else str
    if origin is Literal:
        return str
    if annotation is SecretStr:
        return str
    return origin or annotation


def _set(data: dict[str, Any], path: _KeyPath, value: object) -> bool:
    node: Any = data
    for key in path[:-1]:
        if key not in node:
            node[key] = {}
        node = node[key]
        if not isinstance(node, dict):
            return False
    node[path[-1]] = value
    return True


# --- the model's verdict ---------------------------------------------------------------


def _explain(error: ValidationError, sources: dict[_KeyPath, str]) -> list[str]:
    return [_explain_one(detail, sources) for detail in error.errors(include_url=False)]


def _explain_one(detail: ErrorDetails, sources: dict[_KeyPath, str]) -> str:
    loc: list[str | int] = list(detail["loc"])
    kind: str | None = None
    if len(loc) >= 3 and loc[0] == "targets" and loc[2] in _KINDS:
        kind = str(loc.pop(2))  # the discriminated union puts the kind in the location
    ctx = detail.get("ctx") or {}
    suffix = ""
    error_type = detail["type"]
    if error_type == "overbrainer":
        suffix = str(ctx["suffix"])
        rule = str(ctx["rule"])
    elif error_type in ("union_tag_invalid", "union_tag_not_found"):
        loc.append("kind")
        rule = (
            'must be "local", "ssh" or "runpod"'
            if error_type == "union_tag_invalid"
            else 'is required: kind = "local", "ssh" or "runpod"'
        )
    elif error_type == "missing":
        rule = _missing(loc)
    elif error_type == "extra_forbidden":
        rule = _unknown_key(loc, kind)
    else:
        rule = _rule(error_type, ctx, detail["msg"])
    key = (_dotted(loc) + suffix).lstrip(".")
    source = _source_of(loc, suffix, sources)
    return _format(key, rule, source)


def _dotted(loc: list[str | int]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _source_of(loc: list[str | int], suffix: str, sources: dict[_KeyPath, str]) -> str | None:
    path = [part for part in loc if isinstance(part, str)]
    path += [part for part in suffix.replace("[", ".[").split(".") if part and part[0] != "["]
    for end in range(len(path), 0, -1):
        found = sources.get(tuple(path[:end]))
        if found is not None:
            return found
    return None


def _header(loc: list[str | int]) -> str:
    return ".".join(str(part) for part in loc)


def _missing(loc: list[str | int]) -> str:
    if loc == ["training"]:
        return "is required: add a [training] section with target, base_model and adapter"
    if loc == ["targets"]:
        return 'is required: declare a target, e.g. [targets.local] with kind = "local"'
    field = str(loc[-1])
    example = _EXAMPLES.get(field, "…")
    return f"is required: add {field} = {example} under [{_header(loc[:-1])}]"


def _unknown_key(loc: list[str | int], kind: str | None) -> str:
    field = str(loc[-1])
    if field in _SECRET_NAMES:
        return (
            "is not a setting, and a secret is never read from overbrainer.toml; remove it "
            f"from the file and set {_SECRET_NAMES[field]} in the environment or in .env"
        )
    parent = loc[:-1]
    model: type[BaseModel] | None
    if not parent:
        model = Settings
        where = (
            " (overbrainer.toml has [training], [targets.NAME], [project], [store] and [runpod])"
        )
    elif len(parent) == 1 and str(parent[0]) in _SECTIONS:
        model = _SECTIONS[str(parent[0])]
        where = f" of [{parent[0]}]"
    elif kind is not None:
        model = _KINDS[kind]
        where = f" of a {kind} target"
    else:
        model = None
        where = ""
    hint = ""
    if model is not None:
        fields = [name for name in model.model_fields if (*parent, name) not in _ENV_ONLY]
        fields = [name for name in fields if name != "host"]
        close = difflib.get_close_matches(field, fields, n=1, cutoff=0.75)
        if close:
            hint = f" (did you mean {close[0]}?)"
    return f"is not a known setting{where}{hint}; remove or rename it"


_TYPES = {
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string (in quotes)",
    "list_type": 'must be a list, e.g. ["a", "b"]',
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "finite_number": "must be a finite number (not inf or nan)",
}


def _rule(error_type: str, ctx: dict[str, Any], message: str) -> str:
    if error_type in _TYPES:
        return _TYPES[error_type]
    if error_type == "greater_than":
        return f"must be greater than {_number(ctx['gt'])}"
    if error_type == "greater_than_equal":
        return f"must be at least {_number(ctx['ge'])}"
    if error_type == "less_than":
        return f"must be less than {_number(ctx['lt'])}"
    if error_type == "less_than_equal":
        return f"must be at most {_number(ctx['le'])}"
    if error_type == "too_short":
        return "must not be empty"
    if error_type == "literal_error":
        return f"must be one of {ctx['expected']}"
    if error_type == "value_error":
        return message.removeprefix("Value error, ")
    return message.replace("Input should be", "must be", 1)


def _number(bound: object) -> str:
    """A bound as a person writes it: 720 rather than 720.0."""
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)
