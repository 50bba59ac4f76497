"""What a pod is created with: its environment (``env``) and its container command (``args``).

The bootstrap and watchdog scripts ship with the package (``scripts/*.sh``) and travel to the
pod inside ``env``, gzipped and base64-encoded on one line: they hold no secret. ``args`` is a
short ``bash -c`` line that writes them out and ``exec``s the bootstrap. The only secret in
``env`` is the pod's SSH host private key (:class:`~overbrainer.runpod.keys.RunKeys`); the
account's API key and the Hugging Face token can never be given to :func:`pod_env`, whose
parameters are all named and none of which takes them.
"""

import base64
import gzip
import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from importlib import resources

from overbrainer.config.model import TrainingSettings
from overbrainer.errors import OverbrainerError
from overbrainer.events.ids import check_run_id
from overbrainer.runpod.keys import RunKeys
from overbrainer.runpod.volume_layout import VOLUME_MOUNT

BOOTSTRAP = "bootstrap.sh"
WATCHDOG = "watchdog.sh"

# The run marker: every pod of a run carries its run ID under this name (orphans, `pod ls`).
RUN_MARKER = "OVERBRAINER_RUN"

# Where the container command writes the scripts on the pod.
SCRIPTS_DIR = "/opt/overbrainer"

ENV_RUN_DIR = "OVERBRAINER_RUN_DIR"
ENV_HOST_KEY = "OVERBRAINER_HOST_KEY_B64"
ENV_AUTHORIZED_KEY = "OVERBRAINER_AUTHORIZED_KEY"
ENV_BOOTSTRAP = "OVERBRAINER_BOOTSTRAP_SH"
ENV_WATCHDOG = "OVERBRAINER_WATCHDOG_SH"
ENV_MAX_SECONDS = "OVERBRAINER_MAX_SECONDS"
ENV_MAX_COST = "OVERBRAINER_MAX_COST_USD"
ENV_COST_PER_HOUR = "OVERBRAINER_COST_PER_HOUR"
ENV_SAVE_BEFORE = "OVERBRAINER_SAVE_BEFORE"
ENV_BOOT_GRACE = "OVERBRAINER_BOOT_GRACE"
ENV_STALL_SECONDS = "OVERBRAINER_STALL_SECONDS"
ENV_FIRST_STEP_SECONDS = "OVERBRAINER_FIRST_STEP_SECONDS"
ENV_STALL_GRACE = "OVERBRAINER_STALL_GRACE"
ENV_RETRIEVE_GRACE = "OVERBRAINER_RETRIEVE_GRACE"
ENV_KEEP = "OVERBRAINER_KEEP"
ENV_INTERVAL = "OVERBRAINER_INTERVAL"
ENV_API_BASE = "OVERBRAINER_API_BASE"
ENV_HF_HOME = "OVERBRAINER_HF_HOME"
ENV_VOLUME_LINKS = "OVERBRAINER_VOLUME_LINKS"

# Files the bootstrap and the watchdog keep in the run directory's `.pod/` on the pod.
POD_DIR = ".pod"
VERDICT = ".pod/watchdog"
WATCHDOG_LOG = ".pod/watchdog.log"
BOOTSTRAP_FAILED = ".pod/bootstrap_failed"
RETRIEVED = ".pod/retrieved"
COST_CAP_NEAR = ".pod/cost_cap_near"
JOB_ENV = ".pod/job.env"

# Only characters that need no quoting in a shell or a config file, no leading '-'.
_SAFE_PATH = re.compile(r"^[A-Za-z0-9._/+][A-Za-z0-9._/+-]*$")
_BASE_URL = re.compile(r"^https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~/-]*)?$")


class UnsafePodValue(OverbrainerError):
    """A value that cannot be passed to a pod safely; the message names it, never shows it."""


def script_text(name: str) -> str:
    """The text of a pod script shipped with the package (:data:`BOOTSTRAP`, :data:`WATCHDOG`)."""
    if name not in (BOOTSTRAP, WATCHDOG):
        raise ValueError(f"no pod script named {name!r}")
    return resources.files("overbrainer.runpod").joinpath("scripts", name).read_text("utf-8")


@dataclass(frozen=True)
class StallBound:
    """The stall rule the pod's watchdog keeps when nothing follows the run (seconds): a
    running job whose metrics file has not grown for ``silence`` (before it has grown at
    all: ``first_line`` since the job started) is asked to save and stop, and its pod is
    deleted ``grace`` later ([training] stall_minutes, first_step_minutes,
    stop_timeout_minutes)."""

    silence: float
    first_line: float
    grace: float


STALL_FOLLOW_MARGIN = 2 * 60.0
"""What the watchdog's stall grace adds to ``stop_timeout_minutes``: a follower, which sees
each metrics line within seconds where the watchdog looks once a minute, ends a stalled
job first (its cancel ends the stall rule), so the pod is not deleted under its
collection. A shorter stop timeout is added instead (a fake world's seconds)."""


@dataclass(frozen=True)
class VolumeLink:
    """A link the bootstrap makes from the run's directory on the pod into the network
    volume, before the pod is ready: ``path`` (relative to the run's directory) to
    ``target`` (an absolute path under the volume's mount). ``directory``: the target is a
    directory, made if missing (a file target is left to be put there)."""

    path: str
    target: str
    directory: bool = False

    def word(self) -> str:
        """``path=target`` (a trailing ``/`` for a directory), as the bootstrap reads it."""
        _check_path("a volume link's path", self.path, absolute=False)
        _check_path("a volume link's target", self.target)
        if self.path.startswith("/") or not self.target.startswith(f"{VOLUME_MOUNT}/"):
            raise UnsafePodValue(
                f"a volume link goes from the run's directory to a path under {VOLUME_MOUNT}"
            )
        return f"{self.path}={self.target.rstrip('/')}{'/' if self.directory else ''}"


def stall_bound(training: TrainingSettings) -> StallBound:
    """The stall rule of ``[training]``, for the watchdog."""
    stop = training.stop_timeout_minutes * 60
    return StallBound(
        silence=training.stall_minutes * 60,
        first_line=training.first_step_minutes * 60,
        grace=stop + min(stop, STALL_FOLLOW_MARGIN),
    )


def pod_env(
    run_id: str,
    keys: RunKeys,
    *,
    run_dir: str,
    max_hours: float,
    boot_grace_seconds: float,
    retrieve_grace_seconds: float,
    keep: bool,
    hf_home: str | None = None,
    api_base: str | None = None,
    interval_seconds: float | None = None,
    max_cost_usd: float | None = None,
    expected_cost_per_hour: float | None = None,
    save_before_seconds: float = 0.0,
    stall: StallBound | None = None,
    volume_links: Sequence[VolumeLink] = (),
) -> dict[str, str]:
    """The ``env`` of the create call for run ``run_id``'s pod.

    ``run_dir`` is the run's directory on the pod, absolute or relative to the pod's home
    (``/root``), as the SSH executor's workdir is. ``max_hours`` is the pod's bound: the
    watchdog deletes the pod that long after its creation whatever happens, counting on the
    pod (its monotonic clock, and the pod's age by Runpod's own ``createdAt`` and ``Date``),
    never on the clock of the machine that created it. ``max_cost_usd`` is the pod's cost
    cap: the watchdog deletes the pod once its rate (Runpod's ``cost`` for it, else
    ``expected_cost_per_hour``) times its age reaches it, counted as the deadline is. On a
    cluster's node (the same ``env`` for every member) both bounds end the whole cluster,
    and ``max_cost_usd`` is the cluster's: the watchdog counts the node's rate (and
    ``expected_cost_per_hour``, a node's) times the cluster's nodes.
    ``api_base`` is given only when it is not Runpod's own API (the fake one, in tests and
    the demo). ``save_before_seconds``: the watchdog asks the job to save a checkpoint and
    stop this long before the deadline (0: only when the cost cap is near); it must leave
    time to train. ``stall``: the stall rule the watchdog keeps (None: none).
    ``volume_links``: links the bootstrap makes from the run's directory into the network
    volume (:class:`VolumeLink`).
    """
    check_run_id(run_id)
    _check_path("run_dir", run_dir, absolute=False)
    if hf_home is not None:
        _check_path("hf_home", hf_home)
    if not (math.isfinite(max_hours) and max_hours > 0):
        raise UnsafePodValue("max_hours must be a positive number")
    boot_grace = _seconds("boot_grace_seconds", boot_grace_seconds)
    if not (math.isfinite(save_before_seconds) and 0 <= save_before_seconds < max_hours * 3600):
        raise UnsafePodValue("save_before_seconds must leave time before max_hours")
    retrieve_grace = _seconds("retrieve_grace_seconds", retrieve_grace_seconds)
    env = {
        RUN_MARKER: run_id,
        ENV_RUN_DIR: run_dir,
        ENV_HOST_KEY: base64.b64encode(keys.host_private_key.encode("ascii")).decode("ascii"),
        ENV_AUTHORIZED_KEY: keys.client_public_key,
        ENV_BOOTSTRAP: _packed(script_text(BOOTSTRAP)),
        ENV_WATCHDOG: _packed(script_text(WATCHDOG)),
        ENV_MAX_SECONDS: str(math.ceil(max_hours * 3600)),
        ENV_BOOT_GRACE: boot_grace,
        ENV_RETRIEVE_GRACE: retrieve_grace,
        ENV_KEEP: "1" if keep else "0",
    }
    if save_before_seconds > 0:
        env[ENV_SAVE_BEFORE] = _seconds("save_before_seconds", save_before_seconds)
    if stall is not None:
        env[ENV_STALL_SECONDS] = _seconds("stall silence", stall.silence)
        env[ENV_FIRST_STEP_SECONDS] = _seconds("stall first_line", stall.first_line)
        env[ENV_STALL_GRACE] = _seconds("stall grace", stall.grace)
    if hf_home is not None:
        env[ENV_HF_HOME] = hf_home
    if volume_links:
        env[ENV_VOLUME_LINKS] = " ".join(link.word() for link in volume_links)
    if api_base is not None:
        if not _BASE_URL.match(api_base):
            raise UnsafePodValue("api_base is not a plain http(s) URL")
        env[ENV_API_BASE] = api_base.rstrip("/")
    if interval_seconds is not None:
        env[ENV_INTERVAL] = _seconds("interval_seconds", interval_seconds)
    if max_cost_usd is not None:
        # Rounded down: the pod never gets more than the cap.
        env[ENV_MAX_COST] = _dollars("max_cost_usd", max_cost_usd, ROUND_FLOOR)
    if expected_cost_per_hour is not None:
        # Rounded up: a rate counted higher ends the pod sooner, never later.
        env[ENV_COST_PER_HOUR] = _dollars(
            "expected_cost_per_hour", expected_cost_per_hour, ROUND_CEILING
        )
    for name, value in env.items():
        if "\0" in value or "\n" in value or "\r" in value:
            raise UnsafePodValue(f"pod environment variable {name} holds a NUL or a line break")
    return env


def save_before_seconds(minutes: float, max_hours: float) -> float:
    """How long before the deadline of a pod created for ``max_hours`` its watchdog asks
    the job to save (``save_before_deadline_minutes``): the setting, which leaves time to
    train within the target's ``max_hours``; a pod whose bound was shortened below it (to
    fit its cost cap) is asked a quarter of its bound before."""
    seconds = minutes * 60
    bound = max_hours * 3600
    return seconds if seconds < bound else bound / 4


def pod_args(scripts_dir: str = SCRIPTS_DIR) -> str:
    """The container command: writes both scripts out of ``env`` and ``exec``s the bootstrap.

    It needs ``bash``, ``base64`` and ``gunzip`` in the image; ``scripts_dir`` is where the
    scripts go (a temporary directory in tests).
    """
    _check_path("scripts_dir", scripts_dir)
    steps = [
        "umask 022",
        f"mkdir -p {scripts_dir}",
        f'printf %s "${ENV_WATCHDOG}" | base64 -d | gunzip > {scripts_dir}/{WATCHDOG}',
        f'printf %s "${ENV_BOOTSTRAP}" | base64 -d | gunzip > {scripts_dir}/{BOOTSTRAP}',
        f"exec sh {scripts_dir}/{BOOTSTRAP}",
    ]
    return "bash -c " + shlex.quote(" && ".join(steps))


def _seconds(name: str, value: float) -> str:
    """``value`` as the watchdog reads a time: whole seconds, or with up to 3 decimals."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UnsafePodValue(f"{name} must be a number of seconds")
    if not math.isfinite(value) or round(value * 1000) < 1:
        raise UnsafePodValue(f"{name} must be a positive number of seconds")
    whole, rest = divmod(round(value * 1000), 1000)
    return str(whole) if rest == 0 else f"{whole}.{rest:03d}".rstrip("0")


def _dollars(name: str, value: float, rounding: str) -> str:
    """``value`` as the watchdog reads an amount: USD with up to 6 decimals, more than
    zero and at most a million."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UnsafePodValue(f"{name} must be an amount in USD")
    amount = Decimal(repr(float(value))).quantize(Decimal("0.000001"), rounding=rounding)
    if not Decimal(0) < amount <= Decimal(1_000_000):
        raise UnsafePodValue(f"{name} must be more than $0.000001 and at most $1000000")
    return format(amount.normalize(), "f")


def _packed(text: str) -> str:
    """``text`` gzipped (reproducibly) and base64-encoded: one short line."""
    return base64.b64encode(gzip.compress(text.encode("utf-8"), mtime=0)).decode("ascii")


def _check_path(name: str, value: str, *, absolute: bool = True) -> None:
    if (
        not _SAFE_PATH.match(value)
        or ".." in value.split("/")
        or (absolute and not value.startswith("/"))
    ):
        kind = "an absolute path" if absolute else "a path"
        raise UnsafePodValue(
            f"{name} must be {kind} of letters, digits and ._/+- only, without '..'"
        )
