"""A run's output on the project's network volume: the run directory's ``output`` on the pod
is a link to ``overbrainer/runs/<run>/output`` on the volume, made before the job starts,
so the trainer saves its checkpoints and its final output there while the pull, the
manifests and the checkpoint fetches read ``output/`` as ever (``ctl.sh`` follows a path
given that is a link).

The link is relative (``../../../../runpod-volume/…``): it reads the same on any pod that
mounts the volume, whatever the root the pod's filesystem stands on.
"""

import posixpath

from overbrainer.errors import OverbrainerError
from overbrainer.exec.base import Executor
from overbrainer.exec.manifest import manifest_digest
from overbrainer.runpod.volume_layout import on_pod, run_output_key
from overbrainer.train.layout import CHECKPOINT_PREFIX, OUTPUT_DIR
from overbrainer.train.resume_files import TRAINER_STATE

__all__ = [
    "RESUME_LINK",
    "VolumeOutputError",
    "checkpoint_matches",
    "link_output",
    "output_link",
    "resume_on_volume",
]

# In the run directory ($1), the volume's folder ($2, relative to it) made, and ``output``
# linked to it: a link already there stays; a real folder there is refused (the job would
# save on the container disk). POSIX sh.
_LINK_SCRIPT = """set -e
mkdir -p "$1"
cd "$1"
mkdir -p "$2"
if [ -L output ]; then exit 0; fi
if [ -e output ]; then
    echo "output in $1 is a folder, not the link to the network volume" >&2
    exit 3
fi
ln -s "$2" output
"""


class VolumeOutputError(OverbrainerError):
    """The run's output could not be linked to the volume."""


def output_link(root: str, remote_dir: str, run_id: str) -> str:
    """What the run directory's ``output`` links to: the volume's
    ``run_output_key(run_id)``, relative to the run directory ``root/remote_dir``."""
    run_dir = posixpath.join(root, remote_dir)
    return posixpath.relpath(on_pod(run_output_key(run_id)), run_dir)


async def link_output(executor: Executor, root: str, remote_dir: str, run_id: str) -> None:
    """Make the run directory's ``output`` on the pod the volume's folder of the run.

    Raises:
        VolumeOutputError: the link could not be made (the job is not started).
    """
    run_dir = posixpath.join(root, remote_dir)
    link = output_link(root, remote_dir, run_id)
    try:
        await executor.run_script(
            _LINK_SCRIPT, [run_dir, link], what="linking the run's output to the network volume"
        )
    except OverbrainerError as error:
        raise VolumeOutputError(
            f"cannot save run {run_id}'s output on the network volume ({error})"
        ) from error


async def checkpoint_matches(
    executor: Executor, remote_dir: str, step: int, recorded: str, *, under: str = OUTPUT_DIR
) -> tuple[bool, str]:
    """Whether checkpoint ``step`` in the run directory's ``under`` (its ``output``, on the
    volume) is whole and its manifest, as its job's ``output`` names it, has the digest
    ``recorded``; and, when it is not, why."""
    path = f"{under}/{CHECKPOINT_PREFIX}{step}"
    try:
        found = await executor.manifest(remote_dir, [path])
    except OverbrainerError as error:
        return False, f"its manifest could not be read ({error})"
    if f"{path}/{TRAINER_STATE}" not in found:
        return False, f"it is not whole there (no {TRAINER_STATE})"
    # Recorded as its own job saw it: output/checkpoint-STEP/...
    named = {f"{OUTPUT_DIR}{name.removeprefix(under)}": digest for name, digest in found.items()}
    if manifest_digest(named) != recorded:
        return False, "its files differ from those recorded when it was saved"
    return True, ""


RESUME_LINK = ".volume-resume"
"""In a resumed run's directory on the pod: the link to the volume's output of the run it
resumes from, while the checkpoint there is checked."""

# In the run directory ($1): `check` links .volume-resume to $3 (the volume's output of the
# run resumed from, relative); `adopt` makes that link the run's `resume` folder, where
# the config reads the checkpoint; `drop` removes it. POSIX sh.
_RESUME_SCRIPT = """set -e
cd "$1"
case $2 in
check)
    rm -f .volume-resume
    ln -s "$3" .volume-resume
    ;;
adopt)
    if [ -e resume ] || [ -L resume ]; then
        echo "resume is already in $1" >&2
        exit 3
    fi
    mv .volume-resume resume
    ;;
*) rm -f .volume-resume ;;
esac
"""


async def resume_on_volume(
    executor: Executor, root: str, remote_dir: str, source: str, step: int, recorded: str
) -> tuple[bool, str]:
    """Whether the new run in ``root/remote_dir`` on the pod resumes from checkpoint
    ``step`` of run ``source`` on the volume: when it is there, whole and as ``recorded``
    (its manifest's digest), the run directory's ``resume`` is made a link to the volume's
    output of ``source`` (the checkpoint is then not to be uploaded); otherwise why not.

    Raises:
        VolumeOutputError: the pod could not be asked (the job is not started).
    """
    run_dir = posixpath.join(root, remote_dir)
    link = posixpath.relpath(on_pod(run_output_key(source)), run_dir)
    what = f"finding checkpoint-{step} of run {source} on the network volume"
    try:
        await executor.run_script(_RESUME_SCRIPT, [run_dir, "check", link], what=what)
        fits, why = await checkpoint_matches(
            executor, remote_dir, step, recorded, under=RESUME_LINK
        )
        await executor.run_script(
            _RESUME_SCRIPT, [run_dir, "adopt" if fits else "drop", link], what=what
        )
    except OverbrainerError as error:
        raise VolumeOutputError(f"{what} failed ({error})") from error
    return fits, why
