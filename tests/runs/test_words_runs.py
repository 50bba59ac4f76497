"""A stop signal sent twice at once, as ``timeout -s INT`` sends it, is one request to
stop: ``train`` on this machine detaches once and says so, never 'already stopping'."""

import os
import signal
import subprocess
import sys
import time

from tests.runs.conftest import Project

TIMEOUT_INT = ("timeout", "-s", "INT", "600")


def test_timeout_s_int_which_signals_twice_at_once_is_one_request_to_stop(
    project: Project,
) -> None:
    # GNU timeout sends its signal to the command, then to its whole process group: the
    # command gets it twice within a moment. SIGALRM is what tells timeout its time is up.
    train = subprocess.Popen(
        [*TIMEOUT_INT, sys.executable, "-m", "overbrainer", "-C", str(project.path), "train"],
        env={**project.env, "FAKE_AXOLOTL_STEPS": "300", "FAKE_AXOLOTL_STEP_SECONDS": "0.1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run_id = project.wait_for_state("running", timeout=120)
        time.sleep(0.3)
        os.kill(train.pid, signal.SIGALRM)
        _out, err = train.communicate(timeout=120)
    finally:
        if train.poll() is None:
            train.kill()
    assert train.returncode == 124, err  # timeout's own code: the time was up
    assert "already stopping" not in err and "Traceback" not in err, err
    assert (
        f"interrupted: run {run_id} keeps running on this machine; follow it again with "
        f"`overbrainer train attach {run_id}`"
    ) in err, err
    cancel = project.run("train", "cancel", run_id, timeout=120)
    assert cancel.returncode == 0, cancel.stderr
