"""The demo: a whole training run on this machine, from the installed package alone.

``overbrainer-demo`` (or ``python -m overbrainer.testing.demo``) runs a whole Runpod run with
no GPU and no Runpod account: the fake Runpod API on loopback with a fake pod behind it (a
real SSH server on 127.0.0.1, a real shell, the real bootstrap and watchdog), the stand-in
trainer as the pod's ``axolotl`` — and the real ``overbrainer train`` against them, through
``OVERBRAINER_RUNPOD__BASE_URL``, its GPU type chosen from the catalog that ``pod gpus``
shows first. Then ``runs ls``, ``events`` and ``pod ls``, and the fake server stops.
``… demo local`` does the same on the ``local`` target, with no pod.

Everything lives in a temporary directory (under ``$TMPDIR``) that is removed at the end,
and the fake server is stopped however the demo ends (Ctrl-C, SIGTERM, SIGHUP). It needs
the ``testing`` extra (the wheel's, as ``pipx install 'dist/overbrainer-….whl[testing]'``;
if it is missing the demo names the command that adds it); nothing of the source tree.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from overbrainer.cli.spec import PROJECT
from overbrainer.testing.stand_in import AXOLOTL, TORCHRUN

# The stand-in's pace: a run that is seen to progress, in a few seconds.
TRAINER_ENV = {"FAKE_AXOLOTL_STEPS": "20", "FAKE_AXOLOTL_STEP_SECONDS": "0.15"}

RUNPOD_TARGET = f"""
[targets.gpu]
kind = "runpod"
gpu_types = "auto"
min_vram_gb = 40
max_price_per_hour = 1.5
max_hours = 2
max_cost_usd = 0.5
image = "ghcr.io/example/axolotl@sha256:{"0" * 64}"
retrieve_grace_minutes = 5
"""
"""The demo's Runpod target: the GPU type chosen from the (fake) catalog, the cheapest with
40 GB at most $1.50/h, its pod's bound shortened to what $0.50 pays for. The fake pod runs
no image, so this one is never pulled."""


class DemoFailed(Exception):
    """A step of the demo failed; the message says which."""


def overbrainer_command() -> list[str]:
    """The ``overbrainer`` installed beside this interpreter, else ``python -m overbrainer``."""
    script = Path(sys.executable).with_name("overbrainer")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "overbrainer"]


def write_trainer(venv: Path) -> Path:
    """A target venv whose ``bin/axolotl`` is the stand-in (and ``bin/torchrun`` the stand-in
    launching it as several ranks), run by this interpreter."""
    trainer = venv / "bin" / "axolotl"
    trainer.parent.mkdir(parents=True)
    settings = " ".join(f"{k}={shlex.quote(v)}" for k, v in TRAINER_ENV.items())
    for script, stand_in in ((trainer, AXOLOTL), (venv / "bin" / "torchrun", TORCHRUN)):
        command = f"{shlex.quote(sys.executable)} {shlex.quote(str(stand_in))}"
        script.write_text(f'#!/bin/sh\n{settings} exec {command} "$@"\n')
        script.chmod(0o755)
    return trainer


def _wait(process: subprocess.Popen[bytes]) -> int:
    """The exit code of ``process``, waited for even through Ctrl-C: the terminal sent the
    child the same signal, and the child says what it left before it exits."""
    interrupted: BaseException | None = None
    while True:
        try:
            code = process.wait()
        except (KeyboardInterrupt, SystemExit) as stop:
            interrupted = interrupted or stop
            continue
        if interrupted is not None:
            raise interrupted
        return code


class Demo:
    """One demo's temporary world: its directory, the fake server, the project."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.project = work / "project"
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "FAKE_"))
        }
        self.server: subprocess.Popen[bytes] | None = None
        self.ob = overbrainer_command()

    def cwd(self) -> Path | None:
        """Where the commands run: in the project once it exists, as the echoed commands
        say (so the paths they print are the project's: ``runs/<id>/…``)."""
        return self.project if self.project.is_dir() else None

    def run(self, *argv: str, show: str | None = None, quiet: bool = False) -> None:
        """Run ``overbrainer -C PROJECT ARGV``, echoed as ``$ overbrainer …`` unless quiet."""
        if not quiet:
            print(f"$ overbrainer {show or ' '.join(argv)}", flush=True)
        out = subprocess.DEVNULL if quiet else None
        process = subprocess.Popen(
            [*self.ob, PROJECT.name, str(self.project), *argv],
            env=self.env,
            stdout=out,
            cwd=self.cwd(),
        )
        code = _wait(process)
        if code != 0:
            raise DemoFailed(f"`overbrainer {' '.join(argv)}` exited with {code}")
        if not quiet:
            print(flush=True)

    def output(self, *argv: str) -> str:
        done = subprocess.run(
            [*self.ob, PROJECT.name, str(self.project), *argv],
            cwd=self.cwd(),
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise DemoFailed(f"`overbrainer {' '.join(argv)}` failed: {done.stderr.strip()}")
        return done.stdout

    def init(self) -> None:
        self.run("init", str(self.project), quiet=True)
        data = self.project / "data"
        first = (data / "train.jsonl").read_text().splitlines(keepends=True)[:1]
        (data / "eval.jsonl").write_text("".join(first))

    def last_run(self) -> str:
        lines = self.output("runs", "ls", "--json").splitlines()
        if not lines:
            raise DemoFailed("`overbrainer runs ls` lists no run")
        run_id: str = json.loads(lines[-1])["id"]
        return run_id

    def start_server(self) -> tuple[str, str]:
        """Start the fake Runpod API with living pods; its URL and an account key."""
        out, err = self.work / "server.out", self.work / "server.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            # Its own session: a Ctrl-C in the terminal reaches `overbrainer train`, which
            # still needs the fake Runpod to end its pod; the demo stops the server last.
            self.server = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "overbrainer.testing.fake_pod",
                    "--print-url",
                    "--workspace",
                    str(self.work / "pods"),
                    "--provisioning-seconds",
                    "1",
                    "--starting-seconds",
                    "1",
                    # The watchdog checks every 5 s instead of every minute: its log says more.
                    "--env",
                    "OVERBRAINER_INTERVAL=5",
                ],
                stdout=stdout,
                stderr=stderr,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines = out.read_text().splitlines()
            if len(lines) >= 2:
                return lines[0], lines[1]
            if self.server.poll() is not None:
                raise DemoFailed(
                    f"the fake Runpod server did not start:\n{err.read_text().strip()}"
                )
            time.sleep(0.1)
        raise DemoFailed("the fake Runpod server gave no URL and key within 60 s")

    def stop_server(self) -> None:
        if self.server is None:
            return
        if self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)
                self.server.wait()
        self.server = None

    def runpod(self, nodes: int = 1) -> None:
        """A run on a Runpod pod; ``nodes`` > 1: on a cluster of that many pods."""
        url, key = self.start_server()
        self.init()
        config = self.project / "overbrainer.toml"
        text = config.read_text().replace('\ntarget = "local"', '\ntarget = "gpu"', 1)
        target = RUNPOD_TARGET
        if nodes > 1:
            # The cap counts every node: $1.00 pays for 1 h 15 min of two A40 nodes.
            target = (
                target.replace("max_cost_usd = 0.5", "max_cost_usd = 1.0") + f"nodes = {nodes}\n"
            )
        config.write_text(text + target)
        write_trainer(self.work / "venv")
        self.env.update(
            OVERBRAINER_RUNPOD__BASE_URL=url,
            OVERBRAINER_RUNPOD__API_KEY=key,
            OVERBRAINER_TARGETS__GPU__VENV=str(self.work / "venv"),
        )
        self.run("pod", "gpus", "--min-vram", "40")
        on = f"a cluster of {nodes} Runpod pods" if nodes > 1 else "a Runpod pod"
        self.run("train", show=f"train        # on target gpu: {on} (the fake one at {url})")
        self.run("runs", "ls")
        if nodes > 1:
            self.run("runs", "show", self.last_run(), "--no-plot")
        self.run("events", self.last_run())
        self.run("pod", "ls")

    def local(self) -> None:
        self.init()
        write_trainer(self.work / "venv")
        self.env["OVERBRAINER_TARGETS__LOCAL__VENV"] = str(self.work / "venv")
        self.run("train")
        self.run("runs", "ls")
        self.run("events", self.last_run())


@contextmanager
def _signals_end_the_demo() -> Iterator[None]:
    """SIGTERM and SIGHUP end the demo the way Ctrl-C does: cleaned up, with their code."""

    def leave(number: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + number)

    previous = {n: signal.signal(n, leave) for n in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def install_hint(requirements: Sequence[str], prefix: Path, python: str, wheel: Path | None) -> str:
    """The command that adds ``requirements`` (the ``testing`` extra) to the environment
    at ``prefix`` that runs ``python``: overbrainer is installed from a wheel or a
    checkout, never from an index, so no command names ``overbrainer[testing]`` alone."""
    wanted = " ".join(shlex.quote(r) for r in requirements)
    parts = prefix.parts
    if "pipx" in parts and prefix.parent.name == "venvs":
        return f"pipx inject {shlex.quote(prefix.name)} {wanted}"
    if "uv" in parts and prefix.parent.name == "tools" and wheel is not None:
        return f"uv tool install --force {shlex.quote(f'{wheel}[testing]')}"
    return f"{shlex.quote(python)} -m pip install {wanted}"


def _testing_requirements() -> list[str]:
    """The ``testing`` extra's requirements, as the installed package declares them."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        declared = distribution("overbrainer").requires or []
    except PackageNotFoundError:
        declared = []
    found = [
        r.partition(";")[0].strip() for r in declared if r.replace(" ", "").endswith('=="testing"')
    ]
    return found or ["hypercorn", "jsonschema"]


def _wheel() -> Path | None:
    """The wheel this installation came from, when it says so and the file is still there."""
    from importlib.metadata import PackageNotFoundError, distribution
    from urllib.parse import unquote, urlparse

    try:
        text = distribution("overbrainer").read_text("direct_url.json")
    except PackageNotFoundError:
        return None
    try:
        url = urlparse(str(json.loads(text or "{}").get("url", "")))
    except (ValueError, AttributeError):
        return None
    path = Path(unquote(url.path))
    return path if url.scheme == "file" and path.suffix == ".whl" and path.is_file() else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; its exit code."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="overbrainer-demo",
        description="A whole training run on this machine against stand-ins (no GPU needed).",
    )
    parser.add_argument(
        "target",
        nargs="?",
        choices=["runpod", "cluster", "local"],
        default="runpod",
        help=(
            "runpod (default): a fake Runpod pod on loopback; cluster: a fake cluster of two "
            "pods, the job across both; local: this machine"
        ),
    )
    args = parser.parse_args(argv)
    missing = [m for m in ("hypercorn", "jsonschema") if importlib.util.find_spec(m) is None]
    if args.target != "local" and missing:
        hint = install_hint(_testing_requirements(), Path(sys.prefix), sys.executable, _wheel())
        print(
            f"error: the Runpod demo needs overbrainer's testing extra ({', '.join(missing)} "
            f"missing); install it with: {hint}",
            file=sys.stderr,
        )
        return 1
    with _signals_end_the_demo():
        work = Path(tempfile.mkdtemp(prefix="overbrainer-demo-"))
        demo = Demo(work)
        try:
            if args.target == "runpod":
                demo.runpod()
            elif args.target == "cluster":
                demo.runpod(nodes=2)
            else:
                demo.local()
        except DemoFailed as failed:
            print(f"error: demo: {failed}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("error: demo interrupted", file=sys.stderr)
            return 130
        finally:
            demo.stop_server()
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
