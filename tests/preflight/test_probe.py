"""``probe.sh`` under sh, dash, busybox sh and bash as sh, on real files and processes; and
how its answers read."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from overbrainer.preflight.probes import (
    EngineProbe,
    GpusProbe,
    TrainerProbe,
    engine_args,
    gpus_args,
    parse_engine,
    parse_gpus,
    parse_trainer,
    probe_script,
    trainer_args,
)
from tests.exec.conftest import Shell


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    """A PATH directory with only what the probe needs besides the shell (and python3), so
    no real docker or podman of this machine is found."""
    directory = tmp_path / "tools"
    directory.mkdir()
    for tool in ("dd", "tr", "head", "grep"):
        found = shutil.which(tool)
        assert found, tool
        (directory / tool).symlink_to(found)
    (directory / "python3").symlink_to(sys.executable)
    return directory


def run(shell: Shell, tools: Path, args: list[str], *, path: Path | None = None) -> str:
    dirs = [shell.bin, tools] + ([path] if path else [])
    done = subprocess.run(
        [shell.sh, "-s", "--", *args],
        input=probe_script().encode(),
        capture_output=True,
        env={"PATH": ":".join(map(str, dirs)), "HOME": "/nonexistent"},
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def trainer(shell: Shell, tools: Path, asked: str, *, path: Path | None = None) -> TrainerProbe:
    return parse_trainer(run(shell, tools, trainer_args(asked), path=path), asked)


def write(path: Path, text: str | bytes, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    path.chmod(mode)
    return path


def test_a_venv_trainer_whose_python_starts_is_ok(
    shell: Shell, tools: Path, tmp_path: Path
) -> None:
    axolotl = write(tmp_path / "venv/bin/axolotl", f"#!{sys.executable}\nraise SystemExit(9)\n")
    probe = trainer(shell, tools, str(axolotl))
    assert probe == TrainerProbe(str(axolotl), "ok", str(axolotl), sys.executable)


@pytest.mark.parametrize(
    ("shebang", "interpreter", "program"),
    [
        ("#!/usr/bin/env python3", "/usr/bin/env", "python3"),
        ("#!/usr/bin/env -S python3 -u", "/usr/bin/env", "python3"),
        ("#!/bin/sh -e", "/bin/sh", None),
    ],
)
def test_env_and_shell_shebangs_are_followed(
    shell: Shell, tools: Path, tmp_path: Path, shebang: str, interpreter: str, program: str | None
) -> None:
    axolotl = write(tmp_path / "axolotl", f"{shebang}\nexit 3\n")
    probe = trainer(shell, tools, str(axolotl))
    assert (probe.status, probe.interpreter, probe.program) == ("ok", interpreter, program)


def test_a_name_is_looked_up_on_path_and_a_compiled_program_needs_nothing_more(
    shell: Shell, tools: Path, tmp_path: Path
) -> None:
    bindir = tmp_path / "bin"
    true = shutil.which("true")
    assert true
    bindir.mkdir()
    shutil.copy(true, bindir / "axolotl")
    probe = trainer(shell, tools, "axolotl", path=bindir)
    assert probe == TrainerProbe("axolotl", "ok", str(bindir / "axolotl"))
    assert trainer(shell, tools, "axolotl").status == "missing"


def test_binary_garbage_is_not_read_as_a_shebang(shell: Shell, tools: Path, tmp_path: Path) -> None:
    axolotl = write(tmp_path / "axolotl", b"\x7fELF\x00\x00#!/bin/false\x00" * 40)
    assert trainer(shell, tools, str(axolotl)).status == "ok"


def test_what_cannot_run_is_told_apart(shell: Shell, tools: Path, tmp_path: Path) -> None:
    assert trainer(shell, tools, str(tmp_path / "nowhere/bin/axolotl")).status == "missing"
    plain = write(tmp_path / "plain", "#!/bin/sh\n", mode=0o644)
    assert trainer(shell, tools, str(plain)).status == "not_executable"
    (tmp_path / "dir").mkdir()
    assert trainer(shell, tools, str(tmp_path / "dir")).status == "not_executable"
    moved = write(tmp_path / "moved", "#!/old/venv/bin/python\n")
    probe = trainer(shell, tools, str(moved))
    assert (probe.status, probe.interpreter) == ("no_interpreter", "/old/venv/bin/python")
    gone = write(tmp_path / "gone", "#!/usr/bin/env python-of-nowhere\n")
    probe = trainer(shell, tools, str(gone))
    assert (probe.status, probe.program) == ("no_interpreter", "python-of-nowhere")


def test_an_interpreter_that_fails_to_start_says_why(
    shell: Shell, tools: Path, tmp_path: Path
) -> None:
    python = write(
        tmp_path / "venv/bin/python3.12",
        "#!/bin/sh\necho 'python3.12: error while loading shared libraries: libpython3.12.so"
        ".1.0' >&2\nexit 127\n",
    )
    axolotl = write(tmp_path / "venv/bin/axolotl", f"#!{python}\n")
    probe = trainer(shell, tools, str(axolotl))
    assert probe.status == "interpreter_failed"
    assert probe.detail == (
        "python3.12: error while loading shared libraries: libpython3.12.so.1.0"
    )


def test_an_interpreter_is_started_doing_nothing(shell: Shell, tools: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    python = write(tmp_path / "venv/bin/python", f'#!/bin/sh\necho "$*" > {marker}\n')
    axolotl = write(tmp_path / "venv/bin/axolotl", f"#!{python}\nimport axolotl.cli\n")
    assert trainer(shell, tools, str(axolotl)).status == "ok"
    assert marker.read_text() == "-c \n"  # `python -c ''`: the trainer itself never runs


def test_the_container_engine_answers_or_not(shell: Shell, tools: Path, tmp_path: Path) -> None:
    fake = tmp_path / "engines"
    write(fake / "docker", '#!/bin/sh\n[ "$1 $2 $3" = "version --format {{.Server.Version}}" ]'
                           " && echo 27.1.1\n")  # fmt: skip
    write(fake / "podman", "#!/bin/sh\necho 'Error: unable to connect to Podman socket' >&2\n"
                           "exit 125\n")  # fmt: skip
    said = run(shell, tools, engine_args("docker"), path=fake)
    assert parse_engine(said, "docker") == EngineProbe("docker", "ok", version="27.1.1")
    said = run(shell, tools, engine_args("podman"), path=fake)
    assert parse_engine(said, "podman") == EngineProbe(
        "podman", "no_answer", detail="Error: unable to connect to Podman socket"
    )
    assert parse_engine(run(shell, tools, engine_args("docker")), "docker").status == "missing"


@pytest.mark.parametrize(
    "output",
    ["", "garbage\n", "status=maybe\n", "path=/x\n", "status ok\n", "--\nstatus=ok\n"],
)
def test_an_answer_the_parser_does_not_know_is_never_ok(output: str) -> None:
    assert parse_trainer(output, "axolotl").status == "unreadable"
    assert parse_engine(output, "docker").status == "unreadable"


def test_details_are_one_short_printable_line() -> None:
    output = "status=interpreter_failed\n--\n" + "\x1b[31mboom\x1b[0m\n" * 200
    probe = parse_trainer(output, "axolotl")
    assert probe.status == "interpreter_failed"
    assert "\n" not in probe.detail and "\x1b" not in probe.detail
    assert len(probe.detail) <= 300


def test_the_gpus_nvidia_smi_lists_are_counted(shell: Shell, tools: Path, tmp_path: Path) -> None:
    assert parse_gpus(run(shell, tools, gpus_args())) == GpusProbe(None, "no nvidia-smi")
    bin_dir = tmp_path / "driver"
    listing = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)"
    )
    write(bin_dir / "nvidia-smi", f"#!/bin/sh\n[ \"$1\" = -L ] && printf '%s\\n' '{listing}'\n")
    assert parse_gpus(run(shell, tools, gpus_args(), path=bin_dir)) == GpusProbe(2)
    write(bin_dir / "nvidia-smi", "#!/bin/sh\necho 'NVIDIA-SMI has failed: no driver'\nexit 9\n")
    failed = parse_gpus(run(shell, tools, gpus_args(), path=bin_dir))
    assert failed == GpusProbe(None, "nvidia-smi failed: NVIDIA-SMI has failed: no driver")
