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
from overbrainer.exec.manifest import checkpoint_path, manifest_digest
from overbrainer.exec.ssh import SshExecutor
from overbrainer.runpod.volume_layout import on_pod, run_output_key
from overbrainer.train.layout import OUTPUT_DIR
from overbrainer.train.resume_files import TRAINER_STATE

__all__ = ["VolumeOutputError", "checkpoint_matches", "link_output", "output_link"]

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
    if not isinstance(executor, SshExecutor):
        raise VolumeOutputError(f"the pod's {OUTPUT_DIR} can be linked only over SSH")
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
    executor: Executor, remote_dir: str, step: int, recorded: str
) -> tuple[bool, str]:
    """Whether checkpoint ``step`` in the run directory's ``output`` (on the volume) is
    whole and its manifest's digest is ``recorded``; and, when it is not, why."""
    path = checkpoint_path(step)
    try:
        found = await executor.manifest(remote_dir, [path])
    except OverbrainerError as error:
        return False, f"its manifest could not be read ({error})"
    if f"{path}/{TRAINER_STATE}" not in found:
        return False, f"it is not whole there (no {TRAINER_STATE})"
    if manifest_digest(found) != recorded:
        return False, "its files differ from those recorded when it was saved"
    return True, ""
