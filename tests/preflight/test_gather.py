"""The preflight's drivers on their own: a local process, the fake Runpod API on loopback,
configurations that leave a check out. (Through the real command: test_train_preflight.py;
over a real sshd: tests/runs/test_ssh_train.py.)"""

import time
from pathlib import Path

import pytest

from overbrainer.config.template import project_files
from overbrainer.preflight.checks import Verdict
from overbrainer.targets import preflight as gather
from overbrainer.targets.machine import preflight as machine_preflight
from overbrainer.targets.preflight import preflight
from overbrainer.testing.fake_executor import CANARY_KEY
from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback

PINNED = "ghcr.io/x/axolotl@sha256:" + "b" * 64


def project(tmp_path: Path, targets: str) -> Path:
    path = tmp_path / "project"
    for name, text in project_files().items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    toml = (
        '[training]\ntarget = "t"\nbase_model = "Qwen/Qwen3-0.6B"\nadapter = "lora"\n\n'
        f"[targets.t]\n{targets}"
    )
    (path / "overbrainer.toml").write_text(toml)
    return path


def script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def verdicts(found: gather.Preflight) -> dict[str, Verdict]:
    return {check.name: check.verdict for check in found.report.checks}


async def test_an_interpreter_that_hangs_is_given_up_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine_preflight, "PROBE_SECONDS", 0.5)
    pid_file = tmp_path / "hung.pid"
    python = script(
        tmp_path / "venv/bin/python", f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n"
    )
    script(tmp_path / "venv/bin/axolotl", f"#!{python}\n")
    path = project(tmp_path, f'kind = "local"\nvenv = "{tmp_path / "venv"}"\n')
    started = time.monotonic()
    found = await preflight(path, {})
    assert time.monotonic() - started < 10
    (trainer,) = [check for check in found.report.checks if check.name == "trainer"]
    assert trainer.verdict is Verdict.problem
    assert trainer.problems == (
        f"could not check the trainer {tmp_path}/venv/bin/axolotl on this machine: it did not "
        "answer within 0.5 s",
    )
    assert found.settings is not None and not found.report.ok
    # Nothing the probe started is left behind.
    hung = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{hung}").exists() and "Z" not in _state(hung):
        assert time.monotonic() < deadline, "the hung interpreter is still running"
        time.sleep(0.02)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


async def test_the_docker_runtime_asks_the_engine_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    script(bindir / "docker", "#!/bin/sh\necho 28.0.1\n")
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    path = project(tmp_path, f'kind = "local"\nruntime = "docker"\nimage = "{PINNED}"\n')
    found = await preflight(path, {})
    assert verdicts(found) == {
        "configuration": Verdict.ok,
        "data": Verdict.ok,
        "container engine": Verdict.ok,
        "container image": Verdict.ok,
        "parallelism": Verdict.ok,
        "run files": Verdict.ok,
    }
    assert found.report.checks[2].summary == "docker on this machine answers (version 28.0.1)"
    assert found.report.subject == "target t (local, docker)"


async def test_an_ssh_target_without_its_host_says_which_variable_to_set(tmp_path: Path) -> None:
    found = await preflight(project(tmp_path, 'kind = "ssh"\n'), {})
    (host,) = [check for check in found.report.checks if check.name == "ssh host"]
    assert host.verdict is Verdict.problem
    assert "OVERBRAINER_TARGETS__T__HOST=user@host[:port]" in host.problems[0]


async def test_an_unknown_target_is_a_configuration_problem(tmp_path: Path) -> None:
    found = await preflight(project(tmp_path, 'kind = "local"\n'), {}, target="elsewhere")
    assert found.settings is None and found.report.subject == "the project"
    assert found.report.problems[0].startswith("no target named 'elsewhere' is declared")
    assert verdicts(found)["target"] is Verdict.skipped


async def test_an_unreadable_catalog_warns_and_the_listing_is_kept(tmp_path: Path) -> None:
    fake = FakeRunpod()
    fake.add_account(CANARY_KEY)
    path = project(tmp_path, 'kind = "runpod"\ngpu_types = ["NVIDIA A40"]\nmax_hours = 1\n')
    async with serve_loopback(fake) as base_url:
        env = {"OVERBRAINER_RUNPOD__API_KEY": CANARY_KEY, "OVERBRAINER_RUNPOD__BASE_URL": base_url}
        listed = await preflight(path, env)
        fake.fail_next("GET /catalog/gpus", 200, raw_body=b'{"gpus": "soon"}')
        found = await preflight(path, env)
    assert listed.report.ok and listed.seen.pods == []
    assert found.report.ok  # a warning, not a problem: a create of a bad type fails alone
    assert verdicts(found)["gpu types"] is Verdict.warning
    assert found.report.warnings[0].startswith(
        "could not read Runpod's GPU catalog to check targets.t.gpu_types (cannot read "
        "Runpod's GPU catalog: Runpod's answer could not be read (HTTP 200)"
    )
    assert all(CANARY_KEY not in text for text in found.report.lines())
