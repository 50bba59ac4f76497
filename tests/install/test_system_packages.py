"""``./dev test`` on a machine that lacks system programs the suite drives: it checks
``.ci/system-packages`` before anything runs; as root, or with passwordless sudo, it installs
exactly the missing packages with apt-get and goes on; otherwise it stops at once, before
any setup or test, naming the one command that installs them all.

The real ``./dev`` of a fresh copy of the checkout runs with a PATH made of this machine's
programs less ``zsh``, ``fish`` and ``sudo`` (as if removed), as a user who is not root
(``nobody``, through ``setpriv``, when the suite runs as root). apt-get and sudo are the
stand-ins of ``tests/fakes/apt/``; a stand-in ``.venv`` whose ``just`` only records its
arguments shows whether ``./dev`` went on to the recipe."""

import glob
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.install.world import ROOT, clean_env, fresh_clone

FAKES = ROOT / "tests" / "fakes" / "apt"
REMOVED = ("zsh", "fish")


def listed() -> list[tuple[list[str], str]]:
    """``.ci/system-packages``: (what to look for, package) per line."""
    entries = []
    for line in (ROOT / ".ci" / "system-packages").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            probes, package = line.split()[:2]
            entries.append((probes.split("|"), package))
    return entries


def missing_packages(path: str) -> list[str]:
    """The listed packages none of whose programs is found with this PATH, in list order."""
    missing: list[str] = []
    for probes, package in listed():
        found = any(
            glob.glob(probe) if "/" in probe else shutil.which(probe, path=path) for probe in probes
        )
        if not found and package not in missing:
            missing.append(package)
    return missing


@dataclass
class Machine:
    """A fresh copy of the checkout and a PATH of this machine's programs less some."""

    clone: Path
    bin: Path
    log: Path
    env: dict[str, str]
    user: list[str]

    def dev(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.user, "./dev", *args],
            cwd=self.clone,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def calls(self) -> list[str]:
        """What the stand-in apt-get and sudo were asked, in order."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def recipe_ran(self) -> list[str] | None:
        """The arguments ``./dev`` handed to ``just``, or None where it never did."""
        ran = self.clone / "just-ran"
        return ran.read_text().split("\0")[:-1] if ran.exists() else None

    def set_up(self) -> None:
        """A ``.venv`` that ``./dev`` takes as ready, whose ``just`` records its arguments."""
        bin_dir = self.clone / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        for name, body in (
            ("python", "exit 0"),
            ("just", 'for a in "$@"; do printf \'%s\\0\' "$a"; done >just-ran'),
        ):
            (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
            (bin_dir / name).chmod(0o755)
        stamp = subprocess.run(
            ["sh", "-c", "cksum <pyproject.toml"],
            cwd=self.clone,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (self.clone / ".venv" / ".dev-installed").write_text(stamp)
        hand_over(self.clone)


def hand_over(path: Path) -> None:
    """Make ``path`` the unprivileged user's, as a clone of theirs would be."""
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        for directory, dirs, files in os.walk(path):
            for name in [directory, *(os.path.join(directory, n) for n in dirs + files)]:
                os.lchown(name, nobody.pw_uid, nobody.pw_gid)


def not_root() -> list[str]:
    """The command prefix that runs a program as a user who is not root: ``nobody`` where
    the suite runs as root, else the suite's own user."""
    if os.geteuid() != 0:
        return []
    nobody = pwd.getpwnam("nobody")
    return [
        "setpriv",
        f"--reuid={nobody.pw_uid}",
        f"--regid={nobody.pw_gid}",
        "--clear-groups",
        "--",
    ]


def root() -> list[str]:
    """The command prefix that runs a program as root: none where the suite runs as root,
    else root of a user namespace of its own (``id -u`` says 0 there, as for root)."""
    return [] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--"]


def private_dir(prefix: str) -> Path:
    # Under /tmp, not pytest's tmp_path: that one is private to the suite's user, and the
    # unprivileged user must reach what is in here.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture(scope="module")
def programs() -> Iterator[Path]:
    """This machine's programs (those on a user's PATH) with zsh, fish and sudo removed,
    and apt-get too (each test adds the stand-in)."""
    base = private_dir("overbrainer-sysdeps-bin-")
    try:
        for directory in clean_env(base)["PATH"].split(os.pathsep):
            if not os.path.isdir(directory):
                continue
            for program in sorted(os.listdir(directory)):
                target = os.path.join(directory, program)
                link = base / program
                if (
                    program not in (*REMOVED, "sudo", "apt-get")
                    and not link.is_symlink()
                    and os.path.isfile(target)
                    and os.access(target, os.X_OK)
                ):
                    link.symlink_to(target)
        base.chmod(0o755)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def machine(programs: Path) -> Iterator[Machine]:
    base = private_dir("overbrainer-sysdeps-")
    try:
        clone = fresh_clone(base / "clone")
        # Where the stand-in apt-get "installs" programs, and the stand-ins themselves.
        bin_dir = base / "bin"
        bin_dir.mkdir()
        (bin_dir / "apt-get").symlink_to(FAKES / "apt-get")
        scratch = base / "tmp"
        scratch.mkdir()
        log = base / "apt.log"
        env = clean_env(scratch)
        env.update(
            PATH=f"{bin_dir}{os.pathsep}{programs}",
            HOME=str(base),
            FAKE_APT_LOG=str(log),
            FAKE_APT_BIN=str(bin_dir),
        )
        hand_over(base)
        yield Machine(clone, bin_dir, log, env, not_root())
    finally:
        shutil.rmtree(base, ignore_errors=True)


def expected_missing(machine: Machine) -> list[str]:
    """What ``./dev`` must find missing: zsh and fish, and whatever this machine lacks
    anyway (nothing, where the suite's packages are installed)."""
    missing = missing_packages(machine.env["PATH"])
    assert set(REMOVED) <= set(missing)
    return missing


@pytest.mark.parametrize("recipe", ["test", "reliability", "e2e", "bench"])
def test_without_root_or_sudo_dev_stops_before_any_setup_or_test_naming_the_one_command(
    machine: Machine, recipe: str
) -> None:
    missing = expected_missing(machine)
    done = machine.dev(recipe, "tests/install")
    assert done.returncode == 1, done.stdout + done.stderr
    packages = " ".join(missing)
    assert done.stderr == (
        f"error: ./dev {recipe} needs system programs that this machine lacks, the Debian "
        f"packages {packages} (the suite drives them for real; .ci/system-packages says why). "
        "It installs them itself only as root or with passwordless sudo, and has neither here. "
        f"Run this, then ./dev {recipe} again:\n"
        f"    su -c 'apt-get install -y {packages}'\n"
    )
    assert done.stdout == ""
    # Stopped at once: no .venv made, no lock left, nothing asked of apt-get.
    assert not (machine.clone / ".venv").exists()
    assert not (machine.clone / ".venv.lock").exists()
    assert machine.calls() == []


def test_with_a_sudo_that_asks_for_a_password_dev_test_stops_naming_sudo_apt_get(
    machine: Machine,
) -> None:
    missing = expected_missing(machine)
    machine.set_up()
    (machine.bin / "sudo").symlink_to(FAKES / "sudo")
    done = machine.dev("test", "-q", FAKE_SUDO="password")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.endswith(
        f"Run this, then ./dev test again:\n    sudo apt-get install -y {' '.join(missing)}\n"
    ), done.stderr
    # It asked sudo whether it may, without a prompt, and never ran a test.
    assert machine.calls() == ["sudo -n true"]
    assert machine.recipe_ran() is None


def test_as_root_dev_test_installs_exactly_the_missing_packages_then_runs_the_tests(
    machine: Machine,
) -> None:
    missing = expected_missing(machine)
    machine.set_up()
    machine.user = root()
    done = machine.dev("test", "-q", "tests/install")
    assert done.returncode == 0, done.stdout + done.stderr
    packages = " ".join(missing)
    assert done.stderr == (
        f"dev: installing with apt-get what ./dev test drives and this machine lacks: {packages}\n"
    )
    assert machine.calls() == [
        "uid=0 DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        f"uid=0 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq {packages}",
    ]
    assert machine.recipe_ran() == ["test", "-q", "tests/install"]
    for shell in REMOVED:
        assert (machine.bin / shell).exists()

    # Installed now: the next ./dev test checks without a word and without apt-get.
    machine.log.unlink()
    (machine.clone / "just-ran").unlink()
    done = machine.dev("test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    assert machine.calls() == []
    assert machine.recipe_ran() == ["test"]


def test_with_passwordless_sudo_dev_test_installs_through_sudo_then_runs_the_tests(
    machine: Machine,
) -> None:
    missing = expected_missing(machine)
    machine.set_up()
    (machine.bin / "sudo").symlink_to(FAKES / "sudo")
    done = machine.dev("test", FAKE_SUDO="nopasswd")
    assert done.returncode == 0, done.stdout + done.stderr
    packages = " ".join(missing)
    uid = os.geteuid() if os.geteuid() != 0 else pwd.getpwnam("nobody").pw_uid
    assert machine.calls() == [
        "sudo -n true",
        "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        f"uid={uid} DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        f"sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq {packages}",
        f"uid={uid} DEBIAN_FRONTEND=noninteractive apt-get install -y -qq {packages}",
    ]
    assert machine.recipe_ran() == ["test"]


def test_when_apt_get_fails_dev_test_stops_with_its_reason_and_runs_no_test(
    machine: Machine,
) -> None:
    missing = expected_missing(machine)
    machine.set_up()
    machine.user = root()
    done = machine.dev("test", FAKE_APT_FAIL="1")
    assert done.returncode == 1
    assert done.stderr.endswith(
        f"error: apt-get could not install {' '.join(missing)}; see its message above, then "
        "run ./dev test again\n"
    ), done.stderr
    assert "E: Unable to locate package" in done.stderr
    assert machine.recipe_ran() is None


def test_when_apt_get_installs_but_a_program_is_still_not_found_dev_test_stops(
    machine: Machine,
) -> None:
    missing = expected_missing(machine)
    machine.set_up()
    machine.user = root()
    done = machine.dev("test", FAKE_APT_INSTALLS_NOTHING="1")
    assert done.returncode == 1
    assert done.stderr.endswith(
        f"error: apt-get installed {' '.join(missing)}, yet the programs of "
        f"{' '.join(missing)} are still not found (.ci/system-packages says what is looked "
        "for); install them, then run ./dev test again\n"
    ), done.stderr
    assert machine.recipe_ran() is None


def test_without_apt_get_dev_test_stops_asking_for_the_system_package_manager(
    machine: Machine,
) -> None:
    missing = expected_missing(machine)
    machine.set_up()
    (machine.bin / "apt-get").unlink()
    machine.user = root()
    done = machine.dev("test")
    assert done.returncode == 1
    assert done.stderr == (
        "error: ./dev test needs system programs that this machine lacks, the Debian "
        f"packages {' '.join(missing)} (the suite drives them for real; .ci/system-packages "
        "says why). There is no apt-get here: install them with this system's package "
        "manager, then run ./dev test again\n"
    )
    assert machine.recipe_ran() is None


@pytest.mark.parametrize("recipe", ["lint", "demo", "dist", "--list"])
def test_recipes_that_drive_no_system_program_do_not_ask_for_them(
    machine: Machine, recipe: str
) -> None:
    machine.set_up()
    done = machine.dev(recipe)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    assert machine.calls() == []
    assert machine.recipe_ran() == [recipe]


def test_ci_gets_the_system_programs_from_the_same_list_through_dev_test() -> None:
    # CI runs the README's command and nothing else installs packages: the one list of
    # .ci/system-packages is what both a developer's ./dev test and CI's install.
    ci = (ROOT / ".ci" / "run").read_text()
    assert "apt-get" not in ci
    assert not re.search(r"\b(openssh-server|postgresql|faketime|chromium)\b", ci)
    commands = re.findall(r"^\./dev \S+", ci, re.MULTILINE)
    assert commands[0] == "./dev test", commands
    assert ".ci/system-packages" in (ROOT / "dev").read_text()
