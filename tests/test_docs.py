"""The documentation says what the tool does: every command and option that ``--help``
lists has its section in ``docs/commands.md``; every ``overbrainer`` command of the README
parses against the real command line; the README's Runpod config passes the preflight; each
error its troubleshooting quotes is the one the command prints, produced in a project made
for it; every link between the pages leads somewhere; and the licence is there.

The lists of commands and options come from the real command tree and its ``--help``, never
from a hand-written list: a new command or option fails here until it is documented.
"""

import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from overbrainer.cli.helps import command_paths
from overbrainer.config.template import project_files
from overbrainer.testing.fake_executor import CANARY_KEY
from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback
from overbrainer.testing.stand_in import AXOLOTL

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
COMMANDS = DOCS / "commands.md"
PAGES = ("commands", "configuration", "how-it-works", "reliability", "speed", "development")


# --- reading Markdown -------------------------------------------------------------------


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` of ``text``, up to the next heading of its level or
    above."""
    match = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.MULTILINE)
    assert match, f"no heading {heading!r}"
    level = len(match.group(1))
    rest = text[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Each fenced code block of ``text``: its language (``""`` for none) and its body."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (as GitHub does)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# --- every command and option of --help, documented ---------------------------------------


def real_help(command: str) -> str:
    """What ``overbrainer COMMAND --help`` prints (``""``: the top-level help)."""
    done = subprocess.run(
        [sys.executable, "-m", "overbrainer", *command.split(), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def options_of_command_help(text: str) -> list[str]:
    """The options a command's help lists in its panels (``--tail``, ``-n``, …)."""
    found: list[str] = []
    for line in text.splitlines():
        # A panel's row names its parameter near its left edge (after a `*` column when
        # some parameter is required); a row that goes on describing the one above starts
        # at the descriptions' column, further right.
        row = line[2:]
        if not line.startswith("│ ") or len(row) - len(row.lstrip()) > 3:
            continue
        names = re.split(r"\s{2,}", row.lstrip("* ").strip(), maxsplit=1)[0]
        found += [word for word in names.split() if word.startswith("-")]
    return found


def top_level_help(text: str) -> tuple[dict[str, list[str]], list[str]]:
    """From the top-level help: each command it lists with the options shown on its line,
    and the global options."""
    commands: dict[str, list[str]] = {}
    options: list[str] = []
    part = ""
    for line in text.splitlines():
        if line in ("Commands:", "Options:"):
            part = line
            continue
        if not line.startswith("  ") or line.startswith("   "):
            continue  # a heading, or a description carried onto its own line
        head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        words = head.split()
        if part == "Commands:":
            name = []
            for word in words:
                if not re.fullmatch(r"[a-z][a-z-]*", word):
                    break
                name.append(word)
            flags = re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", head)
            commands.setdefault(" ".join(name), []).extend(flags)
        elif part == "Options:":
            options += [word.rstrip(",") for word in words if word.startswith("-")]
    return commands, options


def documented_sections(text: str) -> dict[str, str]:
    """``docs/commands.md``'s sections, by the command their heading names (``"runs ls"``;
    ``""`` for ``overbrainer`` itself)."""
    found: dict[str, str] = {}
    headings = list(re.finditer(r"^#+ `overbrainer( [^`]*)?`\s*$", text, re.MULTILINE))
    for number, heading in enumerate(headings):
        end = headings[number + 1].start() if number + 1 < len(headings) else len(text)
        found[(heading.group(1) or "").strip()] = text[heading.end() : end]
    return found


def undocumented(wanted: dict[str, list[str]], docs: str) -> list[str]:
    """What ``wanted`` (options by command) lacks in ``docs``, one sentence each."""
    sections = documented_sections(docs)
    missing: list[str] = []
    for command, options in wanted.items():
        shown = f"`overbrainer {command}`" if command else "`overbrainer`"
        if command not in sections:
            missing.append(f"docs/commands.md has no section headed {shown}")
            continue
        for option in dict.fromkeys(options):
            if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", sections[command]):
                missing.append(f"docs/commands.md's section on {shown} does not mention {option}")
    return missing


def wanted_by_help() -> dict[str, list[str]]:
    """Every command of the real tree and every option its help (and the top-level help)
    lists."""
    commands, global_options = top_level_help(real_help(""))
    wanted: dict[str, list[str]] = {"": global_options}
    for command in command_paths():
        wanted[command] = [*commands.get(command, []), *options_of_command_help(real_help(command))]
    for command, options in commands.items():
        wanted.setdefault(command, []).extend(options)
    return wanted


# Each command's --help in a process of its own: slow on a busy machine.
@pytest.mark.timeout(900)
def test_every_command_and_option_that_help_lists_has_its_section_in_docs() -> None:
    wanted = wanted_by_help()
    # The lists were read: the commands and options every user meets are among them.
    assert {"train", "runs ls", "pod gpus", "completion install"} <= set(wanted)
    assert {"--follow", "-f", "--tail", "-n"} <= set(wanted["runs logs"])
    assert {"-C", "--help", "-h", "--version"} <= set(wanted[""])
    assert "--check" in wanted["train"] and "--to" in wanted["store migrate"]
    missing = undocumented(wanted, COMMANDS.read_text())
    assert missing == [], "document these in docs/commands.md:\n" + "\n".join(missing)


def test_the_documentation_check_names_each_command_and_option_it_misses() -> None:
    docs = (
        "# Commands\n\n## `overbrainer`\n\n`-C DIR`\n\n## `overbrainer runs`\n\n"
        "### `overbrainer runs ls`\n\n`--json`, and `--state-of` (another option)\n"
    )
    wanted = {"": ["-C", "--version"], "runs ls": ["--json", "--state"], "runs rm": ["--all"]}
    assert undocumented(wanted, docs) == [
        "docs/commands.md's section on `overbrainer` does not mention --version",
        "docs/commands.md's section on `overbrainer runs ls` does not mention --state",
        "docs/commands.md has no section headed `overbrainer runs rm`",
    ]


def test_options_are_read_from_the_panels_of_a_help() -> None:
    text = (
        "Usage: overbrainer store migrate --to STR [OPTIONS]\n\n"
        "╭─ Parameters ─────╮\n"
        "│ *  --to STR   The team store: postgresql://USER@HOST[:PORT]/DB (no    │\n"
        "│               password in it). [required]                            │\n"
        "│    --dry-run  Show what would be copied; copy nothing. --json too.    │\n"
        "│ --tail -n INT    Only the last N lines (then more with --follow).    │\n"
        "╰──────────────────╯\n"
    )
    assert options_of_command_help(text) == ["--to", "--dry-run", "--tail", "-n"]


@pytest.mark.timeout(900)
def test_every_option_a_synopsis_of_docs_commands_shows_is_one_the_command_has() -> None:
    wanted = wanted_by_help()
    stale = []
    for command, text in documented_sections(COMMANDS.read_text()).items():
        blocks = fenced_blocks(text)
        synopsis = blocks[0][1] if blocks and blocks[0][1].startswith("overbrainer") else ""
        for option in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", synopsis):
            if option not in wanted.get(command, []):
                stale.append(f"`overbrainer {command}`: {option}")
    assert stale == [], "docs/commands.md shows options the command does not have"


def test_every_setting_has_its_entry_in_docs_configuration() -> None:
    from overbrainer.config import model

    text = (DOCS / "configuration.md").read_text()
    missing = []
    for settings in (
        model.Settings,
        model.TrainingSettings,
        model.LocalTarget,
        model.SshTarget,
        model.RunpodTarget,
        model.ProjectSettings,
        model.StoreSettings,
        model.RunpodSettings,
    ):
        for key in settings.model_fields:
            # A key (`epochs`, `[runpod] base_url`) or a section of its own (`[training]`).
            shown = rf"`(?:\[[\w.]+\] )?{key}(?: = [^`]*)?`|`\[{key}[\].]"
            if not re.search(shown, text):
                missing.append(f"{settings.__name__}.{key}")
    assert len(model.RunpodTarget.model_fields) > 10  # the models were read
    assert missing == [], "document these keys in docs/configuration.md"


# --- every README command parses ------------------------------------------------------------


def command_lines(text: str, *, examples_only: bool) -> list[str]:
    """The ``overbrainer`` command lines in the fenced blocks of ``text`` (only the
    ``$ overbrainer`` examples with ``examples_only``)."""
    lines = []
    for _, body in fenced_blocks(text):
        for line in body.splitlines():
            if line.startswith("$ overbrainer ") or (
                not examples_only and line.startswith("overbrainer ")
            ):
                lines.append(line.removeprefix("$ "))
    return lines


def refusal(line: str) -> str | None:
    """Why the real command line would refuse ``line`` (``None``: it parses), without
    running the command."""
    from cyclopts import CycloptsError

    from overbrainer.cli.app import app

    tokens = shlex.split(line, comments=True)[1:]
    while tokens[:1] == ["-C"]:
        tokens = tokens[2:]
    if tokens in (["--version"], ["--help"], ["-h"]):
        return None
    try:
        app.parse_args(tokens, exit_on_error=False, print_error=False)
    except CycloptsError as refused:
        return str(refused)
    return None


def test_every_overbrainer_command_of_the_readme_and_the_docs_parses() -> None:
    lines = command_lines(README.read_text(), examples_only=False)
    assert len(lines) >= 10 and "overbrainer train --check" in " ".join(lines)
    for page in PAGES:
        lines += command_lines((DOCS / f"{page}.md").read_text(), examples_only=True)
    refused = {line: why for line in lines if (why := refusal(line)) is not None}
    assert refused == {}


def test_the_parse_check_refuses_what_the_command_refuses() -> None:
    assert refusal("overbrainer runs ls --state running --last 3  # comment") is None
    assert refusal("overbrainer -C my-project runs show RUN --no-plot") is None
    assert refusal("overbrainer --version") is None
    assert refusal("overbrainer runs ls --bogus") is not None
    assert refusal("overbrainer pod gpus --min-vram many") is not None
    assert refusal("overbrainer trian") is not None


# --- the README's Runpod config, and its troubleshooting ------------------------------------


def readme_runpod_config() -> str:
    blocks = fenced_blocks(section(README.read_text(), "A whole minimal Runpod config"))
    (toml,) = [body for language, body in blocks if language == "toml"]
    return toml


@dataclass
class World:
    """A project made from ``overbrainer init``'s files, the fake Runpod API serving, and
    the environment a command runs with there."""

    path: Path
    fake: FakeRunpod
    env: dict[str, str] = field(default_factory=dict)

    async def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """``command`` (as a user types it, ``overbrainer …``), run for real in the
        project."""
        args = shlex.split(command)
        assert args[0] == "overbrainer"
        with trio.fail_after(120):
            done = await trio.run_process(
                [sys.executable, "-m", "overbrainer", *args[1:]],
                cwd=self.path,
                env=self.env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        return subprocess.CompletedProcess(
            done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
        )


@asynccontextmanager
async def world(tmp_path: Path) -> AsyncIterator[World]:
    fake = FakeRunpod()
    fake.add_account(CANARY_KEY)
    path = tmp_path / "my-project"
    for name, text in project_files().items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "FAKE_"))}
    # No axolotl on this machine's PATH, whatever the machine running the tests has.
    env["PATH"] = os.pathsep.join(
        d for d in env.get("PATH", "").split(os.pathsep) if d and not Path(d, "axolotl").exists()
    )
    env["PYTHONPATH"] = str(ROOT)
    async with serve_loopback(fake) as base_url:
        env["OVERBRAINER_RUNPOD__BASE_URL"] = base_url
        yield World(path, fake, env)


async def test_the_readme_runpod_config_passes_the_preflight(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        (w.path / "overbrainer.toml").write_text(readme_runpod_config())
        w.env["OVERBRAINER_RUNPOD__API_KEY"] = CANARY_KEY
        done = await w.run("overbrainer train --check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "train --check: every check passed on target gpu (runpod)" in done.stdout
    assert CANARY_KEY not in done.stdout + done.stderr
    assert not (w.path / "runs").exists()


def _local_trainer(w: World) -> None:
    venv = w.path.parent / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "axolotl").symlink_to(AXOLOTL)
    w.env["OVERBRAINER_TARGETS__LOCAL__VENV"] = str(venv)


def _bad_line(w: World) -> None:
    _local_trainer(w)
    with (w.path / "data" / "train.jsonl").open("a") as data:
        data.write('{"messages": [{"role": "user", "content": "What is 2+2?"}]}\n')


def _runpod(key: str | None, gpu_types: str | None = None) -> Callable[[World], None]:
    def setup(w: World) -> None:
        config = readme_runpod_config()
        if gpu_types is not None:
            config = re.sub(r"(?m)^gpu_types = .*$", f"gpu_types = {gpu_types}", config)
        (w.path / "overbrainer.toml").write_text(config)
        if key is not None:
            w.env["OVERBRAINER_RUNPOD__API_KEY"] = key

    return setup


# How to meet each error of the README's troubleshooting, by its heading there.
MEET: dict[str, Callable[[World], None]] = {
    "No Axolotl on this machine": lambda w: None,  # init's local target, no axolotl
    "A bad line in the training data": _bad_line,
    "No Runpod key": _runpod(None),
    "Runpod refuses the key": _runpod("rpa_not_a_key_of_this_account"),
    "A GPU type Runpod does not know": _runpod(CANARY_KEY, gpu_types='["RTX 4090"]'),
}


def troubleshooting() -> Iterator[tuple[str, str, list[str]]]:
    """Each error of the README's troubleshooting: its heading, the command, and what it
    prints."""
    text = section(README.read_text(), "Troubleshooting")
    for heading, body in re.findall(r"^### ([^\n]+)\n(.*?)(?=^### |\Z)", text, re.M | re.S):
        (_, quoted), *_ = fenced_blocks(body)
        command, *printed = quoted.splitlines()
        assert command.startswith("$ overbrainer "), heading
        yield heading, command.removeprefix("$ "), printed


@pytest.mark.timeout(900)
async def test_each_troubleshooting_error_is_what_the_command_prints(tmp_path: Path) -> None:
    quoted = list(troubleshooting())
    assert [heading for heading, _, _ in quoted] == list(MEET)
    for number, (heading, command, printed) in enumerate(quoted):
        async with world(tmp_path / str(number)) as w:
            MEET[heading](w)
            done = await w.run(command)
        assert (done.returncode, done.stderr.splitlines()) == (1, printed), (
            f"README's troubleshooting, {heading!r}: `{command}` now exits "
            f"{done.returncode} and prints:\n{done.stderr}"
        )
        assert not (w.path / "runs").exists() and w.fake.pods == {}, heading


# --- the pages, their links, the licence ------------------------------------------------------


def test_the_readme_is_under_400_lines_and_links_every_docs_page() -> None:
    readme = README.read_text()
    assert len(readme.splitlines()) < 400
    for page in PAGES:
        assert f"](docs/{page}.md)" in readme, page
    assert sorted(p.stem for p in DOCS.glob("*.md")) == sorted(PAGES)


def _links() -> Iterator[tuple[Path, str]]:
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if not re.match(r"[a-z]+:", target):
                yield page, target


def test_every_link_between_the_pages_leads_to_a_file_and_a_heading() -> None:
    broken = []
    links = list(_links())
    for page, target in links:
        name, _, anchor = target.partition("#")
        linked = (page.parent / name).resolve() if name else page
        if not linked.exists():
            broken.append(f"{page.name}: {target}: no such file")
        elif anchor:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.M)
            if anchor not in {slug(h) for h in headings}:
                broken.append(f"{page.name}: {target}: no such heading")
    assert len(links) > 20
    assert broken == []


def test_the_licence_is_mit_and_the_package_declares_it() -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License\n")
    assert "Copyright (c) 2026 overbrainer developers" in licence
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert "](LICENSE)" in README.read_text()
