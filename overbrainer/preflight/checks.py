"""The preflight's pure core: named checks from gathered facts to verdicts, and the report.

Every function here takes what a driver found (a data report, a probe's answer, an API
failure's status and text, the GPU catalog) and returns a :class:`Check`; nothing here
touches a file, a process, the network or the clock. Each problem is one line that names
the thing (a file and line, a configuration key, a host) and the fix.
"""

import difflib
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

from overbrainer.config.model import is_pinned_image
from overbrainer.plurals import plural, word
from overbrainer.preflight.probes import EngineProbe, GpusProbe, TrainerProbe
from overbrainer.projections.budget import Budget
from overbrainer.projections.words import duration_text, size_text
from overbrainer.runpod.candidates import NoCandidate, Wanted, choose, hours_text, price_text
from overbrainer.runpod.models import GpuType
from overbrainer.runpod.volumes import VOLUME_MOUNT, VOLUME_PRICE_PER_GB_MONTH, VolumeFound
from overbrainer.train.data import DataReport
from overbrainer.train.parallelism import Choice

if TYPE_CHECKING:
    from overbrainer.runpod.volume_usage import Usage

__all__ = [
    "ApiFailure",
    "Check",
    "DirFact",
    "Report",
    "Verdict",
    "budget_check",
    "budget_unread",
    "candidates_check",
    "capacity_wait_check",
    "config_check",
    "data_check",
    "engine_check",
    "gpu_types_check",
    "gpus_check",
    "host_check",
    "image_check",
    "parallelism_check",
    "project_dirs_check",
    "runpod_key_check",
    "skipped",
    "trainer_check",
    "volume_check",
]


class Verdict(StrEnum):
    """How a check ended."""

    ok = "ok"
    warning = "warning"
    problem = "PROBLEM"
    skipped = "skipped"


@dataclass(frozen=True)
class Check:
    """One named check: what it looked at (``summary``) and what it found."""

    name: str
    verdict: Verdict
    summary: str
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def _check(
    name: str, summary: str, problems: Sequence[str] = (), warnings: Sequence[str] = ()
) -> Check:
    if problems:
        verdict = Verdict.problem
    elif warnings:
        verdict = Verdict.warning
    else:
        verdict = Verdict.ok
    return Check(name, verdict, summary, tuple(problems), tuple(warnings))


def skipped(name: str, why: str) -> Check:
    """A check that could not run because another one failed first (``why`` says which)."""
    return Check(name, Verdict.skipped, why)


@dataclass(frozen=True)
class ApiFailure:
    """A call to Runpod that failed: its HTTP status (None: no answer) and the client's
    message (which never holds the key). ``unreachable``: Runpod could not be reached at
    all, and ``message`` says why and what to check (``cannot reach Runpod (…): …``)."""

    status: int | None
    message: str
    unreachable: bool = False


# --- configuration and data ------------------------------------------------------------


def config_check(source: str, problems: Sequence[str], target: str | None) -> Check:
    """``source`` (the file) read with ``problems`` (none: usable); ``target`` describes
    the target the run would use (None when the configuration does not tell)."""
    if problems:
        count = len(problems)
        return _check("configuration", f"{source}: {plural(count, 'problem')}", problems)
    return _check("configuration", f"{source}: {target}" if target else source)


def data_check(report: DataReport) -> Check:
    """The project's data files, every line checked."""
    files = report.files
    if files is None or report.problems:
        bad = len(report.problems)
        return _check("data", f"data files: {plural(bad, 'problem')}", report.problems)
    summary = (
        f"data/train.jsonl: {plural(files.train_examples, 'example')} "
        f"({files.reasoning_examples} with reasoning)"
    )
    if files.eval_path is not None:
        summary += f"; data/eval.jsonl: {plural(files.eval_examples, 'example')}"
    else:
        summary += "; no eval set"
    return _check("data", summary)


# --- the project's own directories ------------------------------------------------------

DirState = Literal["writable", "creatable", "not_writable", "cannot_create", "not_a_directory"]


@dataclass(frozen=True)
class DirFact:
    """What a directory of the project a run writes into is here: ``name`` as users know
    it (``runs/``), ``path`` where it is, ``state``; for ``cannot_create``, ``parent`` is
    the directory it would be made in; ``why`` is the system's words when one cannot be
    written; ``holds`` what it keeps, for messages."""

    name: str
    path: str
    state: DirState
    holds: str
    parent: str = ""
    why: str = ""


def project_dirs_check(facts: Sequence[DirFact]) -> Check:
    """Whether a run can write what it keeps in the project (its directory under
    ``runs/``, the event log in ``.overbrainer/``): found before the run is created, not
    after (a run recorded, then failed, or a pod paid for)."""
    problems: list[str] = []
    for fact in facts:
        if fact.state == "not_writable":
            problems.append(
                f"{fact.path} cannot be written ({fact.why}): {fact.holds}; make it writable: "
                f"chmod -R u+w {shlex.quote(fact.path)}"
            )
        elif fact.state == "cannot_create":
            problems.append(
                f"{fact.name} cannot be created in {fact.parent} ({fact.why}): {fact.holds}; "
                f"make that directory writable (chmod u+w {shlex.quote(fact.parent)}) or "
                f"create {fact.name} there yourself"
            )
        elif fact.state == "not_a_directory":
            problems.append(f"{fact.path} is not a directory: {fact.holds}; move it out of the way")
    shown = ", ".join(
        fact.name + (" (to be created)" if fact.state == "creatable" else "") for fact in facts
    )
    if problems:
        count = len(problems)
        return _check("run files", f"{plural(count, 'problem')}", problems)
    return _check("run files", f"{shown}: writable")


# --- machine targets -------------------------------------------------------------------


def host_check(host: str, error: str | None) -> Check:
    """Whether the SSH host answered with a host key the known hosts pin, and let us in."""
    if error is not None:
        return _check("ssh host", host, [error])
    return _check("ssh host", f"{host}: answered with its known host key")


def trainer_check(probe: TrainerProbe, *, where: str, venv_key: str) -> Check:
    """The trainer executable on ``where``; ``venv_key`` is the setting that names it."""
    asked = probe.asked
    path = probe.path or asked
    if probe.status == "ok":
        started = f" (interpreter {probe.program or probe.interpreter} starts)"
        return _check("trainer", f"{path} on {where}{started if probe.interpreter else ''}")
    if probe.status == "missing":
        if "/" in asked:
            problem = (
                f"{asked} does not exist on {where}: install Axolotl in that venv "
                f"(pip install axolotl), or set {venv_key} to the venv that holds bin/axolotl"
            )
        else:
            problem = (
                f"no `{asked}` on the PATH of {where}: install Axolotl there, or set "
                f"{venv_key} to the venv that holds bin/axolotl"
            )
    elif probe.status == "not_executable":
        problem = (
            f"{path} on {where} is not an executable file; it must be Axolotl's `axolotl` "
            f"command (check {venv_key})"
        )
    elif probe.status == "no_interpreter":
        wanted = probe.program or probe.interpreter or "?"
        problem = (
            f"{path} on {where} starts with `#!{probe.shebang}`, but {wanted} is not there "
            "(the venv was moved or its Python removed?); recreate the venv and reinstall "
            "Axolotl in it"
        )
    elif probe.status == "interpreter_failed":
        said = f" ({probe.detail})" if probe.detail else ""
        problem = (
            f"the interpreter of {path} on {where}, {probe.program or probe.interpreter}, "
            f"fails to start{said}; repair or recreate the venv"
        )
    else:
        problem = f"could not check the trainer {asked} on {where}: {probe.detail}"
    return _check("trainer", f"{path} on {where}", [problem])


def engine_check(probe: EngineProbe, *, where: str, engine_key: str) -> Check:
    """The container engine on ``where`` answers (its daemon or service is up)."""
    engine = probe.engine
    if probe.status == "ok":
        version = f" (version {probe.version})" if probe.version else ""
        return _check("container engine", f"{engine} on {where} answers{version}")
    if probe.status == "missing":
        problem = (
            f"`{engine}` is not installed on {where} (not on its PATH): install it, or set "
            f"{engine_key} to the engine that is there"
        )
    elif probe.status == "no_answer":
        said = f" ({probe.detail})" if probe.detail else ""
        problem = f"{engine} on {where} does not answer{said}; start it, then check again"
    else:
        problem = f"could not check {engine} on {where}: {probe.detail}"
    return _check("container engine", f"{engine} on {where}", [problem])


def image_check(name: str, key: str, image: str, *, allowed_unpinned: bool, default: bool) -> Check:
    """A container image: pinned by digest, or accepted unpinned by ``allow_unpinned_image``
    (a warning: a later run may get another image). ``default`` says nobody set it."""
    reference, pinned, digest = image.partition("@sha256:")
    shown = f"{reference}@sha256:{digest[:12]}…" if pinned and len(digest) > 12 else image
    if is_pinned_image(image):
        origin = "the default image, " if default else ""
        return _check(name, f"{shown} ({origin}pinned by digest)")
    if allowed_unpinned:
        return _check(
            name,
            f"{shown} (not pinned)",
            warnings=[
                f"{key} is not pinned by digest (allowed by allow_unpinned_image): each run may "
                "get a different image; pin it as name@sha256:<digest>"
            ],
        )
    return _check(
        name,
        shown,
        [f"{key} must be pinned by digest (name@sha256:<64 hex digits>) so every run uses the "
         "same image"],
    )  # fmt: skip


# --- Runpod ------------------------------------------------------------------------------


def runpod_key_check(base_url: str, answer: int | ApiFailure | str) -> Check:
    """The API key, as Runpod took it when asked for the account's pods: their count, the
    call's failure, or (a string) why no call was made."""
    if isinstance(answer, str):
        return _check("runpod key", base_url, [answer])
    if isinstance(answer, int):
        return _check(
            "runpod key", f"accepted by {base_url} ({plural(answer, 'pod')} on the account)"
        )
    if answer.status == 401:
        problem = (
            "OVERBRAINER_RUNPOD__API_KEY: Runpod refused the key (HTTP 401); create a key at "
            "https://www.runpod.io/console/user/settings and set it in the environment or .env"
        )
    elif answer.status == 403:
        problem = (
            "OVERBRAINER_RUNPOD__API_KEY: the key may not list the account's pods (HTTP 403); "
            "give it read and write access to pods, or use another key"
        )
    elif answer.unreachable:
        problem = f"{answer.message}, then check again"
    else:
        problem = (
            f"cannot reach Runpod at {base_url} ({answer.message}); check the connection and "
            "OVERBRAINER_RUNPOD__BASE_URL, then check again"
        )
    return _check("runpod key", base_url, [problem])


def gpu_types_check(
    target: str, gpu_types: Sequence[str], gpu_count: int, catalog: Sequence[GpuType] | ApiFailure
) -> Check:
    """Every ``gpu_types`` entry of target ``target`` exists in Runpod's catalog, is offered
    on the secure cloud (where overbrainer creates pods) and allows ``gpu_count`` GPUs.

    A catalog that could not be read is a warning: it cannot tell, and a create of a type
    that does not exist fails on its own, before anything is billed.
    """
    listed = ", ".join(gpu_types)
    if isinstance(catalog, ApiFailure):
        return _check(
            "gpu types",
            f"{listed}: not checked",
            warnings=[
                f"could not read Runpod's GPU catalog to check targets.{target}.gpu_types "
                f"({catalog.message})"
            ],
        )
    by_id = {gpu.id: gpu for gpu in catalog}
    problems: list[str] = []
    found: list[str] = []
    for index, wanted in enumerate(gpu_types):
        key = f"targets.{target}.gpu_types[{index}]"
        gpu = by_id.get(wanted)
        if gpu is None:
            problems.append(f"{key}: {_unknown_gpu(wanted, catalog)}")
            continue
        if not gpu.offered(secure=True):
            problems.append(
                f'{key}: "{wanted}" is not offered on Runpod\'s secure cloud, where '
                "overbrainer creates pods; choose another GPU type"
            )
            continue
        most = gpu.max_count(secure=True)
        if most is not None and gpu_count > most:
            problems.append(
                f'{key}: a pod of "{wanted}" has at most {plural(most, "GPU")}, and '
                f"targets.{target}.gpu_count is {gpu_count}; lower gpu_count or choose another "
                "GPU type"
            )
            continue
        found.append(_gpu_summary(gpu))
    if problems:
        bad = len(problems)
        return _check("gpu types", f"{bad} of {len(gpu_types)} cannot be used", problems)
    return _check("gpu types", f"in Runpod's catalog: {'; '.join(found)}")


def _unknown_gpu(wanted: str, catalog: Sequence[GpuType]) -> str:
    text = f'"{wanted}" is not a GPU type in Runpod\'s catalog'
    folded = wanted.casefold()
    same_name = [gpu for gpu in catalog if folded in (gpu.name.casefold(), gpu.id.casefold())]
    if same_name:
        gpu = same_name[0]
        return f'{text}; did you mean "{gpu.id}" (its catalog name is "{gpu.name}")?'
    close = difflib.get_close_matches(wanted, [gpu.id for gpu in catalog], n=3, cutoff=0.6)
    if close:
        names = ", ".join(f'"{gpu}"' for gpu in close)
        return f"{text}; close ones: {names}"
    return f"{text}; use a GPU type id exactly as Runpod's catalog spells it"


def candidates_check(wanted: Wanted, catalog: Sequence[GpuType] | ApiFailure) -> Check:
    """The GPU types a run would try, in order, with the price and the bound of each, when
    ``gpu_types = "auto"`` or ``max_cost_usd`` makes the catalog choose them; a problem when
    none may be tried (the message names the setting to change)."""
    name = "gpu candidates"
    try:
        chosen = choose(wanted, None if isinstance(catalog, ApiFailure) else catalog)
    except NoCandidate as error:
        problem = str(error)
        if isinstance(catalog, ApiFailure):
            problem = f"{problem} ({catalog.message})"
        return _check(name, "none may be tried", [problem])
    tried = []
    for candidate in chosen.candidates:
        facts = []
        if candidate.rate is not None:
            facts.append(f"{price_text(candidate.rate)}/h")
        if candidate.stock is not None:
            facts.append(f"stock {candidate.stock.value.lower()}")
        if candidate.shortened:
            facts.append(f"deadline shortened to {hours_text(candidate.max_hours)} by max_cost_usd")
        tried.append(f"{candidate.gpu_type} ({', '.join(facts)})" if facts else candidate.gpu_type)
    summary = f"would try, in order: {'; '.join(tried)}"
    if wanted.nodes > 1:
        summary = (
            f"a cluster of {wanted.nodes} pods of {wanted.gpu_count} GPU(s) each (prices for "
            f"every node, stock for clusters); {summary}"
        )
    if chosen.left:
        summary += f"; {len(chosen.left)} left out: " + "; ".join(
            f"{x.gpu_type} ({x.reason})" for x in chosen.left
        )
    return _check(name, summary)


def capacity_wait_check(name: str, written: str, seconds: float) -> Check:
    """What the walk does when no GPU type has capacity: wait up to ``seconds``
    (``written`` as the target ``name`` sets it), trying every type again meanwhile."""
    return _check(
        "capacity wait",
        f"when no GPU type has capacity, waits up to {duration_text(seconds)} for some, "
        f'trying them all again meanwhile (targets.{name}.wait_for_capacity = "{written}")',
    )


def volume_check(
    size_gb: int,
    found: VolumeFound | ApiFailure,
    name: str,
    center: str,
    held: "Usage | str | None" = None,
) -> Check:
    """The target's network volume ``name`` in ``center``: whether it exists yet (the first
    run creates it, of ``size_gb``), where it is mounted and what it ``held`` (its bytes by
    part, or why they are not known); a problem when it cannot be used or the account's
    volumes could not be listed."""
    label = "network volume"
    where = f"{name} in {center}, mounted at {VOLUME_MOUNT}"
    if isinstance(found, ApiFailure):
        problem = f"cannot list the account's network volumes: {found.message}"
        return _check(label, f"{where}: not looked up", [problem])
    if found.problem is not None:
        return _check(label, f"{where}: cannot be used", [found.problem])
    if found.volume is None:
        cost = price_text(size_gb * VOLUME_PRICE_PER_GB_MONTH)
        return _check(
            label,
            f"{where}: not there yet; the first run creates it ({size_gb} GB, {cost} a month "
            "until it is deleted) and every pod of the target is created in that data center",
        )
    size = f", {found.volume.size_gb} GB" if found.volume.size_gb is not None else ""
    holds = "" if held is None else f"; {held if isinstance(held, str) else _holdings(held)}"
    return _check(label, f"{where}: exists ({found.volume.id}{size}){holds}")


def _holdings(usage: "Usage") -> str:
    """``holds 2.9 GB: model cache 2.8 GB, …`` (the parts that hold anything)."""
    if usage.total == 0:
        return "it holds nothing yet"
    parts = [
        (what, size)
        for what, size in (
            ("model cache", usage.cache),
            ("prepared data", usage.prepared),
            ("data from home", usage.data),
            (f"the output of {plural(len(usage.runs), 'run')}", sum(usage.runs.values())),
            ("files not overbrainer's", usage.other),
        )
        if size
    ]
    listed = ", ".join(f"{what} {size_text(size)}" for what, size in parts)
    return f"holds {size_text(usage.total)}: {listed}"


# --- how the job's processes share the model ---------------------------------------------


def budget_check(budget: Budget, target: str) -> Check:
    """The run against the project's monthly budget: the month's spend, the budget and
    the run's bound; a problem when the run could pass the budget."""
    refusal = budget.refusal(target, None)  # the report says what was not created
    return _check("budget", budget.line().removeprefix("budget: "), [refusal] if refusal else [])


def budget_unread(why: str) -> Check:
    """The month's spend could not be read from the store: the run cannot be checked
    against the monthly budget, so it may not start."""
    return _check(
        "budget",
        "this month's spend: not read",
        [f"project.monthly_budget_usd: the month's spend could not be read ({why})"],
    )


def parallelism_check(choice: Choice) -> Check:
    """The job's processes, the parallelism chosen for them and why, with the memory one
    GPU needs and its basis; a problem when an explicit ``training.parallelism`` cannot
    fit (the message names one that would), a warning when nothing ``auto`` may choose
    fits."""
    if choice.processes == "gpu":
        processes = "one process per GPU the job sees"
    else:
        processes = plural(choice.processes, "process", "processes")
    if choice.parallelism is None:
        summary = f"{processes}: {choice.why}"
    else:
        summary = f"{processes}, {choice.parallelism}: {choice.why}"
    if choice.need_gib is not None and choice.parallelism is not None:
        summary += f" (estimate: {choice.basis})"
    problems = [choice.problem] if choice.problem else []
    warnings = [choice.warning] if choice.warning else []
    return _check("parallelism", summary, problems, warnings)


def gpus_check(gpus: GpusProbe, processes: int | None, *, where: str, key: str) -> Check | None:
    """The GPUs a machine target shows (``nvidia-smi``) against the processes its job runs
    (``processes``; None: one per GPU it sees). None: nothing worth a line (no GPU can be
    counted, and none was asked for by number)."""
    if gpus.count is None:
        if processes is None or processes < 2:
            return None
        return _check(
            "gpus",
            f"not counted on {where} ({gpus.detail})",
            [],
            [
                f"{key} is {processes} and no GPU could be counted on {where} "
                f'({gpus.detail}): the job fails if it has fewer; set device = "cpu" '
                "for a rehearsal on the CPU"
            ],
        )
    shown = plural(gpus.count, "GPU") + f" on {where} (nvidia-smi)"
    if processes is None:
        many = max(gpus.count, 1)
        return _check("gpus", f"{shown}: the job runs {plural(many, 'process', 'processes')}")
    if processes > gpus.count:
        return _check(
            "gpus",
            shown,
            [
                f"{key} is {processes} but {where} shows {plural(gpus.count, 'GPU')}: lower "
                f"it to {max(gpus.count, 1)}, or remove it for one process per GPU"
            ],
        )
    return _check("gpus", f"{shown}: {plural(processes, 'process', 'processes')} use them")


def _gpu_summary(gpu: GpuType) -> str:
    details = []
    if gpu.memory_gb:
        details.append(f"{gpu.memory_gb} GB")
    if gpu.price_secure:
        details.append(f"${gpu.price_secure:.2f}/h per GPU")
    return f"{gpu.id} ({', '.join(details)})" if details else gpu.id


# --- the report --------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """Every check of one preflight, in the order they ran; ``subject`` says what was
    checked ("target gpu (runpod)")."""

    subject: str
    checks: tuple[Check, ...]

    @property
    def problems(self) -> list[str]:
        """Every problem, in order."""
        return [problem for check in self.checks for problem in check.problems]

    @property
    def warnings(self) -> list[str]:
        """Every warning, in order."""
        return [warning for check in self.checks for warning in check.warnings]

    @property
    def ok(self) -> bool:
        """Whether a run may be created: no check found a problem."""
        return not self.problems

    def lines(self) -> list[str]:
        """What ``train --check`` prints: one line per check, its problems and warnings
        below it."""
        width = max((len(check.name) for check in self.checks), default=0)
        out = [f"preflight of {self.subject}:"]
        for check in self.checks:
            out.append(f"  {check.verdict.value:<8} {check.name:<{width}}  {check.summary}")
            out.extend(f"             {problem}" for problem in check.problems)
            out.extend(f"             warning: {warning}" for warning in check.warnings)
        return out

    def failure(self, command: str, check: str = "overbrainer train --check") -> str:
        """The error of a preflight that found problems, each on its own line, and the
        ``command`` to run once they are fixed (``check``: the same, checking only)."""
        problems = self.problems
        count = len(problems)
        lines = [f"preflight found {plural(count, 'problem')}; no run was created:"]
        lines.extend(f"  {problem}" for problem in problems)
        lines.append(
            f"fix {word(count, 'it', 'them')}, then run `{command}` again "
            f"(`{check}` checks without training)"
        )
        return "\n".join(lines)

    def summary(self, command: str = "overbrainer train --check") -> str:
        """The last line of ``train --check`` (``command``: that command line, to run again
        once the problems are fixed)."""
        count = len(self.problems)
        if count == 0:
            return f"train --check: every check passed on {self.subject}"
        return (
            f"train --check: {plural(count, 'problem')} (listed above); fix "
            f"{word(count, 'it', 'them')}, then run `{command}` again"
        )
