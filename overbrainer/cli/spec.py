"""The command tree, declared once: every command, its arguments and options, their help
and what completes them.

Everything else is derived from it: shell completion (``completion.py``), the words that
name a command (``command_words.py``), the fast read path's parsing (``fast_path.py``) and
the top-level help (``main.py``); the test suite holds the cyclopts app to it. A new option
is added here (and to the parameters of the function that does the command).

Plain classes and tuples, no dataclasses or enums: shell completion loads this module at
every Tab and the read commands before they start, where those imports alone would cost
more than the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Literal

    Takes = Literal["flag", "count", "number", "text", "path", "states", "choice"]
    """What an option's value is: none (a flag); a whole number; a number; a text as it is;
    a path; a run state, repeated for several; one of its ``choices``."""
    Source = Literal["run", "target", "dir", "shell", "text"]
    Shell = Literal["bash", "zsh", "fish"]
    """What completes a value: run IDs, the project's target names, a directory (by the
    shell), the shells, or nothing."""

RUN_STATES = ("preparing", "running", "succeeded", "failed", "cancelled", "stopped")
SHELLS: tuple[Shell, ...] = ("bash", "zsh", "fish")

# Help texts are Markdown to cyclopts, where a bare <id> is an HTML tag and vanishes: a
# path with <id> is written as code (`runs/<id>/`), which it prints as it is.
RUN_HELP = "The run: its ID, a unique prefix or suffix of it (ab12), or `runs/<id>/`."
JSON_HELP = "Print one JSON object per line instead of text."


class Option:
    """An option: its spellings (the first is its name), the parameter of the function
    that does the command, its help, what its value is and what completes it, its
    placeholder in the top-level help, and a brief description for completion menus."""

    __slots__ = ("brief", "choices", "complete", "help", "metavar", "names", "param", "takes")

    def __init__(
        self,
        names: tuple[str, ...],
        param: str,
        help: str,
        *,
        takes: Takes = "flag",
        choices: tuple[str, ...] = (),
        complete: Source | None = None,
        metavar: str = "",
        brief: str = "",
    ) -> None:
        self.names, self.param, self.help, self.takes = names, param, help, takes
        self.metavar = metavar
        self.choices, self.brief = choices, brief or help
        self.complete: Source | None = (
            None if takes == "flag" else complete if complete is not None else "text"
        )

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def short(self) -> str | None:
        """The one-letter spelling (``-C``), to which a value may be joined (``-CDIR``)."""
        return next((n for n in self.names if len(n) == 2 and n[1] != "-"), None)

    @property
    def long(self) -> str | None:
        """The spelling with two dashes (``--project``), which takes ``=VALUE`` too."""
        return next((n for n in self.names if n.startswith("--")), None)


class Arg:
    """A positional argument: its placeholder (``RUN``), parameter, help, what completes it,
    and whether it takes any number of values."""

    __slots__ = ("complete", "help", "many", "name", "param")

    def __init__(
        self, name: str, param: str, help: str, *, complete: Source, many: bool = False
    ) -> None:
        self.name, self.param, self.help, self.complete, self.many = (
            name,
            param,
            help,
            complete,
            many,
        )


class Command:
    """A command: its word, help (its first paragraph, then ``more`` paragraphs, each on one
    line) and brief description, positional arguments, options and subcommands. ``does``
    names (as ``module:name``) the function or cyclopts app of a top-level command, loaded
    only when cyclopts needs it; ``fast`` the function the fast read path calls without
    cyclopts; ``overview`` its lines in the top-level help (a synopsis after
    ``overbrainer``, then what it does)."""

    __slots__ = (
        "args",
        "brief",
        "commands",
        "does",
        "fast",
        "help",
        "more",
        "name",
        "options",
        "overview",
    )

    def __init__(
        self,
        name: str,
        help: str,
        *,
        brief: str = "",
        args: tuple[Arg, ...] = (),
        options: tuple[Option, ...] = (),
        commands: tuple[Command, ...] = (),
        more: str = "",
        does: str | None = None,
        fast: str | None = None,
        overview: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.name, self.help, self.brief, self.more = name, help, brief or help, more
        self.does, self.overview = does, overview
        self.args, self.options, self.commands, self.fast = args, options, commands, fast

    def command(self, name: str) -> Command | None:
        return next((c for c in self.commands if c.name == name), None)

    def option(self, spelling: str) -> Option | None:
        return next((o for o in self.options if spelling in o.names), None)


def walk(command: Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Command]]:
    """``command`` and every command below it, each with its words (``("runs", "ls")``)."""
    found = [(path, command)]
    for sub in command.commands:
        found += walk(sub, (*path, sub.name))
    return found


JSON = Option(("--json",), "json", JSON_HELP, brief="one JSON object per line")

YES = Option(("--yes", "-y"), "yes", "Do it without asking first.", brief="do not ask first")
VOLUME_ARG = Arg(
    "NAME",
    "name",
    "The network volume: its name (as a target's `volume` gives it) or its id.",
    complete="text",
)

# The global options: taken by main() before the command's words.
PROJECT = Option(
    ("-C", "--project"),
    "project",
    "where to find the project (default: here; it is found there or in the nearest "
    "directory above); it goes before the command",
    takes="path",
    complete="dir",
    metavar="DIR",
    brief="the project directory",
)
GLOBAL_OPTIONS = (
    PROJECT,
    Option(
        ("--help", "-h"),
        "help",
        "this help; overbrainer COMMAND --help prints a command's own",
        brief="overbrainer's help",
    ),
    Option(("--version",), "version", "overbrainer's version"),
)

# What the top-level help explains besides the options.
GLOSSARY = (("RUN", "a run ID, a unique prefix or suffix of it, or runs/<id>/"),)

# Every command offers it (cyclopts answers it; completion offers it).
HELP = Option(("--help",), "help", "show this command's help")

TREE = Command(
    "overbrainer",
    "Fine-tune language models with Axolotl on this machine, over SSH, or on a Runpod pod "
    "that is deleted once its results are home and verified.",
    options=GLOBAL_OPTIONS,
    commands=(
        Command(
            "init",
            "Write overbrainer.toml, .env.example, .gitignore and data/ into DIR.",
            does="overbrainer.cli.init_cmd:init",
            more="Never overwrites a file that exists: it is kept as it is.",
            overview=(
                ("init [DIR]", "write overbrainer.toml, .env.example, data/ and .gitignore"),
            ),
            brief="write a new project",
            args=(
                Arg(
                    "DIRECTORY",
                    "directory",
                    "The project directory (default: the one given with -C, else the current "
                    "one). A relative DIR is taken relative to the -C directory.",
                    complete="dir",
                ),
            ),
        ),
        Command(
            "config",
            "Inspect the project's configuration.",
            does="overbrainer.cli.config_cmd:app",
            brief="the project's configuration",
            commands=(
                Command(
                    "check",
                    "Print the resolved configuration with secrets masked, or every problem at "
                    "once.",
                    more=(
                        "Reads overbrainer.toml, then the environment and .env (OVERBRAINER_* "
                        "variables). Exit code 1 when anything is wrong."
                    ),
                    overview=(
                        (
                            "config check",
                            "print the resolved configuration (secrets masked) or every problem",
                        ),
                    ),
                    fast="overbrainer.cli.config_check:check_config",
                    brief="the resolved configuration, or every problem",
                    options=(
                        Option(
                            ("--json",),
                            "json",
                            "Print one JSON object instead of text.",
                            brief="one JSON object per line",
                        ),
                    ),
                ),
            ),
        ),
        Command(
            "train",
            "Create a run, start its job on the target, follow it to its end and bring the "
            "results home verified.",
            does="overbrainer.cli.train_cmd:app",
            overview=(
                (
                    "train [--target NAME] [--keep-pod]",
                    "check everything a run needs, then create a run, start its job, follow it,"
                    " bring the results home",
                ),
                (
                    "train --check [--target NAME]",
                    "only those checks: print each with its verdict, create nothing",
                ),
                ("train --resume-from RUN[:STEP]", "a new run that goes on from RUN's checkpoint"),
                (
                    "train --detach",
                    "start a run, then leave it to `overbrainer supervise` once its job runs",
                ),
            ),
            brief="check, create a run, train, bring the results home",
            options=(
                Option(
                    ("--target",),
                    "target",
                    "The target to train on (default: training.target).",
                    takes="text",
                    complete="target",
                    brief="the target to train on",
                ),
                Option(
                    ("--keep-pod",),
                    "keep_pod",
                    "Runpod only: keep the pod once the job started, until `overbrainer pod rm "
                    "RUN`.",
                    brief="Runpod: keep the pod once the job started",
                ),
                Option(
                    ("--check",),
                    "check",
                    "Only run the preflight checks (configuration, data, the target's trainer or "
                    "Runpod account; with --resume-from, the checkpoint and the settings it "
                    "needs) and print them; create no run.",
                    brief="only the preflight checks; create nothing",
                ),
                Option(
                    ("--resume-from",),
                    "resume_from",
                    "Go on from run RUN's last checkpoint at home (RUN:STEP: the one of that "
                    "step): the base model, adapter, LoRA shape and sequence length must be the "
                    "ones it trained with.",
                    takes="text",
                    complete="run",
                    brief="go on from a run's checkpoint (RUN[:STEP])",
                ),
                Option(
                    ("--detach",),
                    "detach",
                    "Once the run's job has started, stop following it (recorded in its log) "
                    "and exit: `overbrainer supervise` follows it, or `overbrainer train attach "
                    "RUN`.",
                    brief="leave the started run to `overbrainer supervise`",
                ),
            ),
            commands=(
                Command(
                    "attach",
                    "Follow a started run again (after Ctrl-C, a lost connection, a reboot), then"
                    " retrieve its results and end its pod.",
                    overview=(
                        (
                            "train attach RUN",
                            "follow a started run again, then collect it and end its pod",
                        ),
                    ),
                    brief="follow a started run again",
                    args=(Arg("RUN", "run", RUN_HELP, complete="run"),),
                ),
                Command(
                    "cancel",
                    "Stop the run's job, retrieve what it left, end its pod.",
                    overview=(
                        (
                            "train cancel RUN",
                            "stop the run's job, collect what it left, end its pod",
                        ),
                    ),
                    brief="stop a run's job, collect it, end its pod",
                    args=(Arg("RUN", "run", RUN_HELP, complete="run"),),
                ),
                Command(
                    "stop",
                    "Ask the run's job to save a checkpoint and stop, then retrieve its results "
                    "with that checkpoint and end its pod: the run ends `stopped`, and "
                    "`overbrainer train --resume-from RUN` goes on from it.",
                    more=(
                        "A job that has not stopped within `[training] stop_timeout_minutes` "
                        "(default 5) is cancelled. A run followed from another checkout is asked "
                        "through the log."
                    ),
                    overview=(
                        (
                            "train stop RUN",
                            "have the job save a checkpoint and stop; collect it, end its pod",
                        ),
                    ),
                    brief="have a run's job save a checkpoint and stop; collect it",
                    args=(Arg("RUN", "run", RUN_HELP, complete="run"),),
                ),
            ),
        ),
        Command(
            "supervise",
            "Follow every unfinished run of the project's store as `train attach` would, "
            "until it ends and its results are home, and keep doing so for runs started "
            "later (`train --detach`).",
            does="overbrainer.cli.supervise_cmd:supervise",
            more=(
                "It leaves alone a run that another live command follows (a `train`, a `train "
                "attach`, another `supervise`), saying which, and takes over one whose "
                "follower is gone. All it knows comes from the log: restarted, it goes on. "
                "Ctrl-C or SIGTERM stops following (the jobs keep running, pods stay bounded "
                "by their watchdogs). docs/commands.md shows it run as a systemd service."
            ),
            overview=(
                (
                    "supervise [--once] [--poll SECONDS]",
                    "follow every unfinished run to its end and collect it, and the runs "
                    "started later (with --once, only those of now)",
                ),
            ),
            brief="follow every unfinished run, now and later",
            options=(
                Option(
                    ("--once",),
                    "once",
                    "Follow the runs unfinished now to their end, then exit (for cron and "
                    "scripts).",
                    brief="the runs unfinished now only, then exit",
                ),
                Option(
                    ("--poll",),
                    "poll",
                    "How often to look for new unfinished runs, in seconds (default 30).",
                    takes="number",
                    metavar="SECONDS",
                    brief="seconds between looks for new runs",
                ),
            ),
        ),
        Command(
            "runs",
            "List and show this project's runs (no network).",
            does="overbrainer.cli.runs_cmd:app",
            brief="this project's runs",
            commands=(
                Command(
                    "ls",
                    "One line per run: id, state (with the checkpoint step a run can be resumed "
                    "from), target, created, progress (step, percent), loss, ETA of a run in "
                    "progress, pod and spend (and the host it runs from, when some run of a team "
                    "store is not this machine's).",
                    overview=(
                        (
                            "runs ls [--state S] [--last N] [--since 30d] [--all] [--json]",
                            "one line per run: state, progress, loss, ETA, pod, spend (as "
                            "Runpod billed it, or ~estimated); --since ends with a total; --all"
                            " also the runs whose files were removed",
                        ),
                    ),
                    fast="overbrainer.cli.runs_read:list_runs",
                    brief="one line per run",
                    options=(
                        JSON,
                        Option(
                            ("--state",),
                            "state",
                            "Only runs in this state (preparing, running, succeeded, failed, "
                            "cancelled, stopped); repeat it for several.",
                            takes="states",
                            choices=RUN_STATES,
                            brief="only runs in this state",
                        ),
                        Option(
                            ("--last",),
                            "last",
                            "Only the N newest runs (after --state).",
                            takes="count",
                            brief="only the N newest runs",
                        ),
                        Option(
                            ("--since",),
                            "since",
                            "Only runs created in this last span of time (12h, 7d, 30d, 2w), then"
                            " the total they cost and how much of it is estimated.",
                            takes="text",
                            brief="only runs created in 12h, 7d, 30d…; the total",
                        ),
                        Option(
                            ("--all",),
                            "all_runs",
                            "Also the runs whose files were removed (runs rm, runs gc).",
                            brief="also the runs whose files were removed",
                        ),
                    ),
                ),
                Command(
                    "show",
                    "The run's record, its pod, a metrics summary, where it lives and where its "
                    "files are, then its training and evaluation loss against the step: drawn on "
                    "a terminal, as a table elsewhere.",
                    overview=(
                        (
                            "runs show RUN [--no-plot] [--json]",
                            "a run's record, pod, progress and files, and its loss curves",
                        ),
                    ),
                    fast="overbrainer.cli.runs_read:show_run",
                    brief="a run's record, progress, pod, files and loss curves",
                    args=(Arg("RUN", "run", RUN_HELP, complete="run"),),
                    options=(
                        JSON,
                        Option(
                            ("--no-plot",),
                            "no_plot",
                            "Leave out the loss curves (drawn after the record).",
                            brief="leave out the loss curves",
                        ),
                    ),
                ),
                Command(
                    "logs",
                    "Print the job's log of a run (the trainer's output), read where it is: this "
                    "machine, the SSH host, the pod; from `runs/<id>/job.log` once the run ended "
                    "with it home.",
                    overview=(
                        (
                            "runs logs RUN [--follow] [--tail N] [--rank K] [--node K] "
                            "[--pod [--source S]]",
                            "the job's log (or the pod's own), wherever it is",
                        ),
                    ),
                    brief="the job's log, or the pod's own",
                    args=(Arg("RUN", "run", RUN_HELP, complete="run"),),
                    options=(
                        Option(
                            ("--follow", "-f"),
                            "follow",
                            "Keep printing as the log grows, until the job (with --pod: the pod) "
                            "ends.",
                            brief="keep printing as it grows",
                        ),
                        Option(
                            ("--tail", "-n"),
                            "tail",
                            "Only the last N lines (then more with --follow).",
                            takes="count",
                            brief="only the last N lines",
                        ),
                        Option(
                            ("--rank",),
                            "rank",
                            "Only the lines of one process (rank K) of a job of several, "
                            "without their `[rankK]:` mark.",
                            takes="count",
                            metavar="K",
                            brief="only one process's lines",
                        ),
                        Option(
                            ("--node",),
                            "node",
                            "A cluster's run only: the job's log on node K of its cluster, "
                            "read there (the run's log is node 0's).",
                            takes="count",
                            metavar="K",
                            brief="a cluster's run: node K's log",
                        ),
                        Option(
                            ("--pod",),
                            "pod",
                            "Runpod only: the pod's own log from Runpod's API (its image pull, "
                            "its container's output), even while it starts.",
                            brief="Runpod: the pod's own log",
                        ),
                        Option(
                            ("--source",),
                            "source",
                            "With --pod: only Runpod's system log (image pull, container start) "
                            "or only the container's output (default: both).",
                            takes="choice",
                            choices=("system", "container"),
                            brief="with --pod: system or container",
                        ),
                    ),
                ),
                Command(
                    "compare",
                    "Compare runs side by side: their loss curves overlaid, their final and best "
                    "losses, durations and spend, and the settings that differ between them.",
                    overview=(
                        (
                            "runs compare RUN RUN...",
                            "runs side by side: losses, durations, spend, settings that differ",
                        ),
                    ),
                    brief="runs side by side",
                    args=(
                        Arg(
                            "RUNS",
                            "runs",
                            "Two runs or more: its ID, a unique prefix or suffix of it (ab12), or"
                            " `runs/<id>/`.",
                            complete="run",
                            many=True,
                        ),
                    ),
                    options=(
                        JSON,
                        Option(
                            ("--no-plot",),
                            "no_plot",
                            "Leave out the overlaid loss curves.",
                            brief="leave out the loss curves",
                        ),
                    ),
                ),
                Command(
                    "report",
                    "Write one self-contained HTML page (no network needed to view it) with the "
                    "runs' loss and eval-loss curves, timelines, what they came to, settings and "
                    "events; one run, or several compared.",
                    overview=(
                        (
                            "runs report RUN... [-o FILE]",
                            "one self-contained HTML page: curves, timeline, settings, events",
                        ),
                    ),
                    brief="one self-contained HTML page",
                    args=(
                        Arg(
                            "RUNS",
                            "runs",
                            "One run or more: its ID, a unique prefix or suffix of it (ab12), or "
                            "`runs/<id>/`.",
                            complete="run",
                            many=True,
                        ),
                    ),
                    options=(
                        Option(
                            ("--output", "-o"),
                            "output",
                            "Where to write the page (default: `runs/<id>/report.html` for one "
                            "run, `reports/<id>.html` for one whose files were removed, "
                            "`reports/compare-<id>-<id>….html` for several, by the IDs' last four"
                            " characters).",
                            takes="path",
                            brief="the file to write",
                        ),
                    ),
                ),
                Command(
                    "rm",
                    "Remove finished runs' files from this machine (each one's directory under "
                    "runs/: output, checkpoints, logs, keys); their events stay, and `runs ls "
                    "--all` still lists them. A run not ended, or whose pod may still exist, is "
                    "refused with the command that ends it.",
                    overview=(
                        (
                            "runs rm RUN...",
                            "remove finished runs' files from this machine; their events stay",
                        ),
                    ),
                    brief="remove finished runs' files (their events stay)",
                    args=(
                        Arg(
                            "RUNS",
                            "runs",
                            "One run or more: its ID, a unique prefix or suffix of it (ab12), or "
                            "`runs/<id>/`.",
                            complete="run",
                            many=True,
                        ),
                    ),
                ),
                Command(
                    "gc",
                    "Remove the files of the finished runs created more than a span ago, as runs "
                    "rm does, but the best ones: a dry run by default, listing each run, what it "
                    "frees and what is left and why; --delete removes them.",
                    overview=(
                        (
                            "runs gc --older-than 30d [--keep-best N] [--delete] [--json]",
                            "the same for runs older than a span: a dry run unless --delete",
                        ),
                    ),
                    brief="remove the files of runs older than a span",
                    options=(
                        Option(
                            ("--older-than",),
                            "older_than",
                            "Only runs created more than this span ago (12h, 7d, 30d, 2w).",
                            takes="text",
                            brief="runs created more than 12h, 7d, 30d… ago",
                        ),
                        Option(
                            ("--keep-best",),
                            "keep_best",
                            "Keep the N runs of lowest final loss (eval_loss, else loss), however"
                            " old.",
                            takes="count",
                            brief="keep the N runs of lowest final loss",
                        ),
                        Option(
                            ("--delete",),
                            "delete",
                            "Remove them (without it: only show what would go).",
                            brief="remove them (default: a dry run)",
                        ),
                        JSON,
                    ),
                ),
            ),
        ),
        Command(
            "events",
            "Replay a run's events: sequence, UTC time, name and what happened (with -v, the "
            "fields and the actor too).",
            does="overbrainer.cli.events_cmd:events",
            more=(
                "--follow keeps printing events as other processes append them (woken by the "
                "server's notifications on a PostgreSQL store), until the run has ended and no "
                "pod of it may bill (or Ctrl-C)."
            ),
            overview=(
                (
                    "events RUN [-v] [--json] [--at N] [--follow]",
                    "the run's audit log: every transition, when, by whom",
                ),
            ),
            fast="overbrainer.cli.events_read:replay",
            brief="a run's audit log",
            args=(Arg("RUN", "run", RUN_HELP, complete="run"),),
            options=(
                JSON,
                Option(
                    ("--at",),
                    "at",
                    "Print the run and pod as they were after event N.",
                    takes="count",
                    brief="the run and pod after event N",
                ),
                Option(
                    ("--follow",),
                    "follow",
                    "Keep printing events as they are appended, until the run has ended and no "
                    "pod of it may bill.",
                    brief="keep printing new events",
                ),
                Option(
                    ("--verbose", "-v"),
                    "verbose",
                    "Also print each event's fields and who appended it.",
                    brief="each event's fields and actor too",
                ),
            ),
        ),
        Command(
            "pod",
            "The account's overbrainer pods on Runpod, deleting every pod of a run, what Runpod "
            "billed for them, and Runpod's catalog of GPU types and data centers.",
            does="overbrainer.cli.pod_cmd:app",
            brief="the account's overbrainer pods and Runpod's catalog",
            commands=(
                Command(
                    "ls",
                    "The account's overbrainer pods, each with its run and a note: in progress, "
                    "ended but not deleted, kept, awaiting retrieval, stray, not in this store, "
                    "no marker, or gone.",
                    overview=(
                        ("pod ls [--json]", "the account's overbrainer pods, each classified"),
                    ),
                    brief="the pods, each classified",
                    options=(JSON,),
                ),
                Command(
                    "rm",
                    "Delete every pod of run RUN (a run ID, never a pod ID) and wait until Runpod"
                    " no longer shows them; one line per deleted pod with its uptime and spend.",
                    overview=(
                        (
                            "pod rm RUN [--force]",
                            "delete every pod of a run and wait until they are gone",
                        ),
                    ),
                    brief="delete every pod of a run",
                    args=(
                        Arg(
                            "RUN",
                            "run",
                            "The run whose pods to delete: its ID, a unique prefix or suffix of "
                            "it, or `runs/<id>/` (never a pod ID).",
                            complete="run",
                        ),
                    ),
                    options=(
                        Option(
                            ("--force",),
                            "force",
                            "Delete every pod of the run whatever its state (a run not in this "
                            "store, still starting, or in progress too); a run in progress is "
                            "failed.",
                            brief="whatever the run's state",
                        ),
                    ),
                ),
                Command(
                    "gpus",
                    "Runpod's GPU types, cheapest first: memory, price per GPU-hour on the secure"
                    " and the community cloud, the most per pod and the stock, as the catalog "
                    "says now (read once; a copy under a minute old is reused).",
                    overview=(
                        (
                            "pod gpus [--min-vram GB] [--max-price USD] [--in-stock] [--data-"
                            "center ID]\n[--json]",
                            "Runpod's GPU types: memory, price per hour, stock; cheapest first",
                        ),
                    ),
                    brief="Runpod's GPU types, cheapest first",
                    options=(
                        Option(
                            ("--min-vram",),
                            "min_vram",
                            "Only types with at least this much memory per GPU, in GB.",
                            takes="count",
                            brief="at least this many GB per GPU",
                        ),
                        Option(
                            ("--max-price",),
                            "max_price",
                            "Only types costing at most this much per GPU-hour on the secure "
                            "cloud (where overbrainer creates pods), in USD.",
                            takes="number",
                            brief="at most this many USD per GPU-hour",
                        ),
                        Option(
                            ("--in-stock",),
                            "in_stock",
                            "Only types Runpod has in stock now.",
                            brief="only types in stock now",
                        ),
                        Option(
                            ("--data-center",),
                            "data_center",
                            "Show (and with --in-stock, filter by) the stock in this data center "
                            "(`overbrainer pod datacenters` lists them).",
                            takes="text",
                            brief="the stock in this data center",
                        ),
                        JSON,
                    ),
                ),
                Command(
                    "datacenters",
                    "Runpod's data centers: id (what a target's data_center_ids takes), name, "
                    "region, network volume types and compliance (read once; a copy under a "
                    "minute old is reused).",
                    overview=(("pod datacenters [--json]", "Runpod's data centers"),),
                    brief="Runpod's data centers",
                    options=(JSON,),
                ),
                Command(
                    "billing",
                    "Read what Runpod billed for the pods of these runs that are gone and whose "
                    "billed amount is not final yet, and record it beside overbrainer's estimate;"
                    " one line per pod. An amount is final once Runpod's clock is past the end of"
                    " the hour the pod ended in and 10 minutes past its end; until then it is "
                    "what Runpod billed so far.",
                    overview=(
                        (
                            "pod billing [RUN...] [--json]",
                            "read what Runpod billed for the runs' gone pods",
                        ),
                    ),
                    brief="what Runpod billed for gone pods",
                    args=(
                        Arg(
                            "RUNS",
                            "runs",
                            "Runs to read (default: every run of this project): its ID, a unique "
                            "prefix or suffix of it (ab12), or `runs/<id>/`.",
                            complete="run",
                            many=True,
                        ),
                    ),
                    options=(JSON,),
                ),
            ),
        ),
        Command(
            "volume",
            "The account's Runpod network volumes: what each holds and costs and which runs "
            "used it, what takes its space, pruning old checkpoints from it, deleting it.",
            does="overbrainer.cli.volume_cmd:app",
            brief="the account's network volumes",
            commands=(
                Command(
                    "ls",
                    "The account's network volumes: name, id, data center, size, what it holds "
                    "(read through Runpod's S3 API; unknown without its key), what it costs a "
                    "month ($0.07 per GB) and the runs of this project that used it.",
                    overview=(
                        (
                            "volume ls [--json]",
                            "the network volumes: size, used, monthly cost, runs that used them",
                        ),
                    ),
                    brief="the network volumes",
                    options=(JSON,),
                ),
                Command(
                    "du",
                    "What takes the space of a network volume: the model cache, the prepared "
                    "data, the data from home, each run's checkpoints and output, and anything "
                    "not overbrainer's. Needs the S3 API key (OVERBRAINER_RUNPOD__S3_ACCESS_KEY "
                    "and OVERBRAINER_RUNPOD__S3_SECRET).",
                    overview=(
                        (
                            "volume du NAME [--json]",
                            "what takes a volume's space: cache, data, checkpoints per run",
                        ),
                    ),
                    brief="what takes a volume's space",
                    args=(VOLUME_ARG,),
                    options=(JSON,),
                ),
                Command(
                    "prune",
                    "Delete the checkpoints on a network volume written more than a span ago, "
                    "but none of a run in progress and never the newest of a run that did not "
                    "succeed (a resume starts from it); the run's final output stays. Says what "
                    "it deletes and frees, and asks first (--yes: does not ask).",
                    more="Needs the S3 API key, as volume du does.",
                    overview=(
                        (
                            "volume prune NAME --checkpoints-older-than 30d [--yes]",
                            "delete a volume's old checkpoints (never a resume's)",
                        ),
                    ),
                    brief="delete a volume's old checkpoints",
                    args=(VOLUME_ARG,),
                    options=(
                        Option(
                            ("--checkpoints-older-than",),
                            "checkpoints_older_than",
                            "Only checkpoints written more than this span ago (12h, 7d, 30d, 2w).",
                            takes="text",
                            brief="checkpoints written more than 12h, 7d, 30d… ago",
                        ),
                        YES,
                    ),
                ),
                Command(
                    "rm",
                    "Delete a network volume and all it holds, and wait until Runpod no longer "
                    "lists it; refused while a run of this project that used it has not ended "
                    "or a pod or cluster mounts it, naming them and what ends them. Asks first "
                    "(--yes: does not ask).",
                    overview=(
                        (
                            "volume rm NAME [--yes]",
                            "delete a network volume no run or pod uses",
                        ),
                    ),
                    brief="delete a network volume",
                    args=(VOLUME_ARG,),
                    options=(YES,),
                ),
            ),
        ),
        Command(
            "store",
            "The event store: move this checkout's history to a team store.",
            does="overbrainer.cli.store_cmd:app",
            brief="the event store",
            commands=(
                Command(
                    "migrate",
                    "Copy this checkout's SQLite event log into a PostgreSQL team store.",
                    more=(
                        "Every event keeps its time and actor. Idempotent: a second run copies "
                        "only what is missing. Afterwards each run's event count and last event "
                        "are compared on both sides."
                    ),
                    overview=(
                        (
                            "store migrate --to URL [--dry-run]",
                            "copy this project's SQLite history into a team store",
                        ),
                    ),
                    brief="copy this history into a team store",
                    options=(
                        Option(
                            ("--to",),
                            "to",
                            "The team store: postgresql://USER@HOST[:PORT]/DB (no password in it).",
                            takes="text",
                            brief="the team store's postgresql:// URL",
                        ),
                        Option(
                            ("--dry-run",),
                            "dry_run",
                            "Show what would be copied; copy nothing.",
                            brief="show what would be copied",
                        ),
                        JSON,
                    ),
                ),
            ),
        ),
        Command(
            "completion",
            "Shell completion (bash, zsh, fish): commands, options, target names and run IDs. "
            "Install it with `overbrainer completion install`.",
            does="overbrainer.cli.completion_cmd:app",
            brief="shell completion",
            commands=(
                *(
                    Command(
                        shell,
                        f"Print the {shell} completion script (`overbrainer completion install` "
                        "installs it).",
                        brief=f"print the {shell} completion script",
                    )
                    for shell in SHELLS
                ),
                Command(
                    "install",
                    "Install completion for your shell: its script, and for bash and zsh one line"
                    " in ~/.bashrc or ~/.zshrc that loads it. Running it again only refreshes the"
                    " script.",
                    overview=(
                        (
                            "completion install [--shell bash|zsh|fish]",
                            "complete commands, targets and run IDs at Tab in your shell",
                        ),
                    ),
                    brief="install completion for your shell",
                    options=(
                        Option(
                            ("--shell",),
                            "shell",
                            "bash, zsh or fish (default: your $SHELL).",
                            takes="choice",
                            choices=SHELLS,
                            complete="shell",
                            brief="bash, zsh or fish",
                        ),
                    ),
                ),
            ),
        ),
    ),
)


def top_help(tree: Command = TREE) -> str:
    """``overbrainer --help``: the commands' overview lines and the global options, in 80
    columns."""
    valued = [o for o in tree.options if o.metavar]
    given = "".join(f"[{o.name} {o.metavar}] " for o in valued)
    lines = [f"Usage: overbrainer {given}COMMAND [ARGS]", ""]
    lines += _wrapped(tree.help, 78)
    lines += ["", "Commands:"]
    for _, command in walk(tree):
        for synopsis, text in command.overview:
            first, *more = synopsis.split("\n")
            hang = " " * (first.index(" [") + 1) if more else ""
            lines += _entry([first, *(hang + line for line in more)], text)
    lines += ["", "Options:"]
    # The options that take a value (by their name), what those values are, then the flags
    # (by every spelling).
    for option in valued:
        lines += _entry([f"{option.name} {option.metavar}"], option.help)
    for name, text in GLOSSARY:
        lines += _entry([name], text)
    for option in tree.options:
        if not option.metavar:
            lines += _entry([", ".join(sorted(option.names, key=len))], option.help)
    return "\n".join(lines) + "\n"


_COLUMN = 29


def _entry(synopsis: list[str], text: str) -> list[str]:
    """One entry of a help list: its synopsis lines from column 3, ``text`` from column 30
    (beside a short one-line synopsis, else below it)."""
    described = _wrapped(text, 80 - _COLUMN - 3)
    heads = [f"  {line}" for line in synopsis]
    if len(heads) == 1 and len(heads[0]) <= _COLUMN - 2:
        heads[0] = heads[0].ljust(_COLUMN) + described.pop(0)
    return heads + [" " * _COLUMN + line for line in described]


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken between words (textwrap
    would cost an import of re at every start)."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line]
