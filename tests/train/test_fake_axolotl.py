"""The stand-in ``axolotl`` run for real, in run directories made by prepare_run_dir."""

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from overbrainer.testing.stand_in import AXOLOTL, TORCHRUN
from overbrainer.train.axolotl import (
    dump_config,
    job_environment,
    prepare_run_dir,
    render_config,
    trainer_commands,
)
from overbrainer.train.metrics import MetricsEvent, MetricsSummary, parse_metrics_lines
from tests.train.conftest import example, settings, write_jsonl

FAKE = AXOLOTL
CANARY = "hf_CANARY_d0n0tl34k"


def _run_dir(tmp_path: Path, project: Path, *, evaluation: bool = False, **changes: Any) -> Path:
    if evaluation:
        write_jsonl(project / "data" / "eval.jsonl", [example(), example()])
    run_dir = tmp_path / "runs" / "20250101-000000-abcd"
    run_dir.mkdir(parents=True)
    prepare_run_dir(run_dir, project, settings(**changes))
    return run_dir


def _env(**knobs: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "FAKE_"))}
    env.update(job_environment())
    env["FAKE_AXOLOTL_STEP_SECONDS"] = "0.01"
    env.update(knobs)
    return env


def _run(
    run_dir: Path, command: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=run_dir, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _train(run_dir: Path, **knobs: str) -> subprocess.CompletedProcess[str]:
    return _run(run_dir, [str(FAKE), "train", "axolotl.yaml"], _env(**knobs))


def _metrics(run_dir: Path) -> list[MetricsEvent]:
    # One read: the stand-in may be writing a line meanwhile (left for the next look).
    data = (run_dir / "metrics.jsonl").read_bytes()
    events, malformed, consumed = parse_metrics_lines(data)
    assert malformed == 0
    assert b"\n" not in data[consumed:], "a whole line was left unread"
    return events


def test_train_writes_metrics_and_outputs(tmp_path: Path, project: Path) -> None:
    run_dir = _run_dir(tmp_path, project, epochs=2, learning_rate=1e-4)
    result = _train(run_dir, FAKE_AXOLOTL_STEPS="4", HF_TOKEN=CANARY)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() and result.stderr.strip()

    events = _metrics(run_dir)
    assert events[0].event == "begin"
    assert events[0].max_steps == 4
    logs = [event for event in events[1:] if event.event == "log"]
    assert [event.step for event in logs] == [1, 2, 3, 4]
    assert all(event.max_steps == 4 for event in logs)
    losses = [event.loss for event in logs if event.loss is not None]
    assert len(losses) == 4
    assert losses == sorted(losses, reverse=True)
    assert logs[0].learning_rate == 1e-4
    assert logs[-1].epoch == 2.0
    assert all(event.eval_loss is None for event in events)

    summary = MetricsSummary().with_events(events)
    assert (summary.step, summary.max_steps, summary.epoch) == (4, 4, 2.0)
    # Training over, the plugin says what is saved next: a LoRA adapter here.
    assert events[-1].event == "phase"
    assert events[-1].phase == "saving_adapter"

    output = run_dir / "output"
    assert (output / "adapter_model.safetensors").stat().st_size == 64 * 1024
    assert (output / "adapter_config.json").is_file()
    assert (output / "checkpoint-1" / "adapter_model.safetensors").is_file()
    assert (output / "saw_hf_token").read_text() == "yes"
    assert CANARY not in result.stdout + result.stderr


def test_eval_losses_when_the_config_has_test_datasets(tmp_path: Path, project: Path) -> None:
    run_dir = _run_dir(tmp_path, project, evaluation=True)
    result = _train(run_dir, FAKE_AXOLOTL_STEPS="3")
    assert result.returncode == 0, result.stderr
    evals = [event.eval_loss for event in _metrics(run_dir) if event.eval_loss is not None]
    assert len(evals) >= 1
    assert MetricsSummary().with_events(_metrics(run_dir)).eval_loss == evals[-1]


def test_saw_hf_token_no(tmp_path: Path, project: Path) -> None:
    run_dir = _run_dir(tmp_path, project)
    env = _env(FAKE_AXOLOTL_STEPS="1")
    env.pop("HF_TOKEN", None)
    env.pop("HUGGING_FACE_HUB_TOKEN", None)
    assert _run(run_dir, [str(FAKE), "train", "axolotl.yaml"], env).returncode == 0
    assert (run_dir / "output" / "saw_hf_token").read_text() == "no"


def test_exit_knob(tmp_path: Path, project: Path) -> None:
    run_dir = _run_dir(tmp_path, project)
    result = _train(run_dir, FAKE_AXOLOTL_STEPS="2", FAKE_AXOLOTL_EXIT="3")
    assert result.returncode == 3
    # begin, two steps, and the phase the plugin writes when training ends.
    assert [event.event for event in _metrics(run_dir)] == ["begin", "log", "log", "phase"]
    assert (run_dir / "output" / "adapter_model.safetensors").is_file()


def test_no_metrics_knob(tmp_path: Path, project: Path) -> None:
    run_dir = _run_dir(tmp_path, project)
    result = _train(run_dir, FAKE_AXOLOTL_NO_METRICS="1")
    assert result.returncode == 0
    assert not (run_dir / "metrics.jsonl").exists()
    assert (run_dir / "output" / "adapter_model.safetensors").is_file()


def test_plugin_is_found_only_through_pythonpath(tmp_path: Path, project: Path) -> None:
    # Like Axolotl: an unimportable plugin is logged and training goes on without metrics.
    run_dir = _run_dir(tmp_path, project)
    env = _env(FAKE_AXOLOTL_STEPS="1")
    env.pop("PYTHONPATH")
    result = _run(run_dir, [str(FAKE), "train", "axolotl.yaml"], env)
    assert result.returncode == 0
    assert "Failed to load plugin: overbrainer_metrics.OverbrainerMetricsPlugin" in result.stderr
    assert not (run_dir / "metrics.jsonl").exists()


def test_output_size_knob(tmp_path: Path, project: Path) -> None:
    run_dir = _run_dir(tmp_path, project, adapter="full")
    assert _train(run_dir, FAKE_AXOLOTL_STEPS="1", FAKE_AXOLOTL_OUTPUT_MB="0.5").returncode == 0
    assert (run_dir / "output" / "model.safetensors").stat().st_size == 512 * 1024
    assert not (run_dir / "output" / "adapter_model.safetensors").exists()


def test_trainer_commands_with_merge(tmp_path: Path, project: Path) -> None:
    training = settings(merge=True)
    run_dir = _run_dir(tmp_path, project, merge=True)
    env = _env(FAKE_AXOLOTL_STEPS="2")
    for command in trainer_commands(training, str(FAKE)):
        result = _run(run_dir, command, env)
        assert result.returncode == 0, result.stderr
    assert (run_dir / "output" / "merged" / "model.safetensors").stat().st_size > 0


def test_merge_without_an_adapter_fails(tmp_path: Path, project: Path) -> None:
    run_dir = _run_dir(tmp_path, project, merge=True)
    result = _run(run_dir, [str(FAKE), "merge-lora", "axolotl.yaml"], _env())
    assert result.returncode == 1
    assert "no adapter to merge" in result.stderr


def test_bad_invocations(tmp_path: Path, project: Path) -> None:
    run_dir = _run_dir(tmp_path, project)
    assert _run(run_dir, [str(FAKE), "serve"], _env()).returncode == 2
    missing = _run(run_dir, [str(FAKE), "train", "nope.yaml"], _env())
    assert missing.returncode == 1
    assert "nope.yaml not found" in missing.stderr
    (run_dir / "data" / "train.jsonl").unlink()
    no_data = _train(run_dir)
    assert no_data.returncode == 1
    assert "data/train.jsonl not found" in no_data.stderr
    (run_dir / "axolotl.yaml").write_text("base_model: [unclosed\n")
    assert "cannot parse" in _train(run_dir).stderr


def _load_fake() -> ModuleType:
    loader = SourceFileLoader("fake_axolotl", str(FAKE))
    spec = importlib.util.spec_from_loader("fake_axolotl", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"adapter": "qlora", "hub_model_id": "me/x", "merge": True},
        {"adapter": "full", "axolotl_extra": {"special_tokens": {"pad_token": "<pad>"}}},
        {"axolotl_extra": {"lora_target_modules": ["q_proj", "v_proj"], "warmup_ratio": 0.1}},
    ],
)
def test_fallback_yaml_reader_matches_pyyaml(changes: dict[str, Any]) -> None:
    fake = _load_fake()
    for has_eval in (False, True):
        cfg = render_config(settings(**changes), has_eval=has_eval)
        assert fake._mini_yaml(dump_config(cfg)) == cfg == yaml.safe_load(dump_config(cfg))


def test_runs_without_pyyaml(tmp_path: Path, project: Path) -> None:
    # -S drops site-packages, so the stand-in falls back on its own reader.
    run_dir = _run_dir(tmp_path, project, evaluation=True)
    command = [sys.executable, "-S", str(FAKE), "train", "axolotl.yaml"]
    probe = _run(run_dir, [sys.executable, "-S", "-c", "import yaml"], _env())
    assert probe.returncode != 0, "PyYAML should not be importable without site-packages"
    result = _run(run_dir, command, _env(FAKE_AXOLOTL_STEPS="2"))
    assert result.returncode == 0, result.stderr
    assert any(event.eval_loss is not None for event in _metrics(run_dir))


# --- signals --------------------------------------------------------------------------


@pytest.fixture
def started(tmp_path: Path, project: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    """A run directory, and a list to put started stand-ins in (killed at the end)."""
    processes: list[subprocess.Popen[bytes]] = []
    yield _run_dir(tmp_path, project), processes
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _start(
    run_dir: Path, processes: list[subprocess.Popen[bytes]], **knobs: str
) -> subprocess.Popen[bytes]:
    env = _env(FAKE_AXOLOTL_STEPS="2000", FAKE_AXOLOTL_STEP_SECONDS="0.02", **knobs)
    process = subprocess.Popen(
        [str(FAKE), "train", "axolotl.yaml"],
        cwd=run_dir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    processes.append(process)
    deadline = time.monotonic() + 10
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.exists() and len(metrics.read_bytes().splitlines()) >= 2):
        assert time.monotonic() < deadline, "the stand-in never started training"
        assert process.poll() is None
        time.sleep(0.01)
    return process


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie waiting for a reaper counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_sigterm_exits(started: tuple[Path, list[subprocess.Popen[bytes]]]) -> None:
    run_dir, processes = started
    process = _start(run_dir, processes)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=5) == 143
    # Every line written before the signal is whole.
    assert _metrics(run_dir)[0].event == "begin"


def test_sigterm_ignored_needs_sigkill(started: tuple[Path, list[subprocess.Popen[bytes]]]) -> None:
    run_dir, processes = started
    process = _start(run_dir, processes, FAKE_AXOLOTL_ON_SIGTERM="ignore")
    process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert process.poll() is None
    process.kill()
    assert process.wait(timeout=5) == -signal.SIGKILL


def test_hang_knob_stops_the_lines_after_its_step_and_keeps_running(
    started: tuple[Path, list[subprocess.Popen[bytes]]],
) -> None:
    run_dir, processes = started
    process = _start(run_dir, processes, FAKE_AXOLOTL_HANG_AFTER="3")
    deadline = time.monotonic() + 10
    while not any(e.step == 3 for e in _metrics(run_dir)):
        assert time.monotonic() < deadline, "the stand-in never reached step 3"
        time.sleep(0.01)
    size = (run_dir / "metrics.jsonl").stat().st_size
    (run_dir / "stop_request").write_text("")  # a hung job does not answer it either
    time.sleep(0.5)  # 25 steps' time
    assert process.poll() is None
    assert (run_dir / "metrics.jsonl").stat().st_size == size
    assert [e.step for e in _metrics(run_dir) if e.event == "log"] == [1, 2, 3]
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=5) == 143


def test_end_save_knob_holds_the_result_back_after_the_saving_phase(
    started: tuple[Path, list[subprocess.Popen[bytes]]],
) -> None:
    run_dir, processes = started
    process = subprocess.Popen(
        [str(FAKE), "train", "axolotl.yaml"],
        cwd=run_dir,
        env=_env(FAKE_AXOLOTL_STEPS="3", FAKE_AXOLOTL_END_SAVE_SECONDS="0.8"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    processes.append(process)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 10
    while not metrics.exists() or b'"saving_' not in metrics.read_bytes():
        assert time.monotonic() < deadline, "the stand-in never began saving its end"
        time.sleep(0.01)
    # Saving its end: the job runs on, its result not written yet.
    time.sleep(0.3)
    assert process.poll() is None
    assert not (run_dir / "output" / "adapter_model.safetensors").exists()
    assert process.wait(timeout=10) == 0
    assert (run_dir / "output" / "adapter_model.safetensors").is_file()


def test_grandchild_dies_with_the_group(
    started: tuple[Path, list[subprocess.Popen[bytes]]],
) -> None:
    run_dir, processes = started
    process = _start(run_dir, processes, FAKE_AXOLOTL_SPAWN_CHILD="1")
    grandchild = int((run_dir / "grandchild.pid").read_text())
    assert not _gone(grandchild)
    assert os.getpgid(grandchild) == process.pid
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=5) == 143
    assert _wait_gone(grandchild)


def test_grandchild_is_stopped_after_a_normal_end(tmp_path: Path, project: Path) -> None:
    run_dir = _run_dir(tmp_path, project)
    assert _train(run_dir, FAKE_AXOLOTL_STEPS="1", FAKE_AXOLOTL_SPAWN_CHILD="1").returncode == 0
    assert _wait_gone(int((run_dir / "grandchild.pid").read_text()))


def _torchrun(run_dir: Path, workers: int, **knobs: str) -> subprocess.CompletedProcess[str]:
    command = [str(TORCHRUN), "--standalone", "--nnodes", "1", "--nproc-per-node", str(workers)]
    command += ["--role", "rank", "--tee", "3", "-m", "axolotl.cli.train", "axolotl.yaml"]
    return _run(run_dir, command, _env(**knobs))


def test_the_stand_in_torchrun_runs_ranks_whose_parts_are_in_each_checkpoint_before_it_is_announced(
    tmp_path: Path, project: Path
) -> None:
    run_dir = _run_dir(tmp_path, project)
    result = _torchrun(
        run_dir,
        2,
        FAKE_AXOLOTL_STEPS="4",
        FAKE_AXOLOTL_SAVE_EVERY="2",
        FAKE_AXOLOTL_RANK_SAVE_SECONDS="0.3",
    )
    assert result.returncode == 0, result.stderr
    saved = [event.step for event in _metrics(run_dir) if event.event == "saved"]
    assert saved == [2, 4]
    for step in saved:
        names = sorted(p.name for p in (run_dir / "output" / f"checkpoint-{step}").iterdir())
        assert {"rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"} <= set(names)
    lines = result.stdout.splitlines()
    assert any(line.startswith("[rank0]:") for line in lines)
    assert any(line.startswith("[rank1]:") for line in lines)


def test_a_failing_rank_ends_the_stand_in_torchrun_and_the_other_ranks(
    tmp_path: Path, project: Path
) -> None:
    run_dir = _run_dir(tmp_path, project)
    result = _torchrun(
        run_dir,
        2,
        FAKE_AXOLOTL_STEPS="400",
        FAKE_AXOLOTL_FAIL_RANK="1",
        FAKE_AXOLOTL_FAIL_AFTER="0.2",
    )
    assert result.returncode == 1
    assert "rank 1 (local_rank 1) exitcode 3" in result.stderr
    assert "[rank1]:" in result.stderr and "the stand-in's rank 1 failed" in result.stderr
    assert not (run_dir / "output" / "adapter_config.json").exists()  # rank 0 was ended


def test_the_stand_in_downloads_a_missing_base_model_at_the_set_rate_then_finds_it(
    tmp_path: Path, project: Path
) -> None:
    run_dir = _run_dir(tmp_path, project)
    hf_home = tmp_path / "hf"
    knobs = {
        "HF_HOME": str(hf_home),
        "FAKE_HUB_MODEL_MB": "4",
        "FAKE_HUB_MB_PER_SECOND": "8",
        "FAKE_AXOLOTL_STEPS": "1",
    }
    started = time.monotonic()
    cold = _train(run_dir, **knobs)
    cold_seconds = time.monotonic() - started
    assert cold.returncode == 0, cold.stderr
    record = hf_home / "fake_hub_downloads.jsonl"
    lines = record.read_text().splitlines()
    assert len(lines) == 1 and '"model.safetensors"' in lines[0]
    assert cold_seconds >= 0.5  # 4 MB at 8 MB/s
    warm = _train(run_dir, **knobs)
    assert warm.returncode == 0, warm.stderr
    assert record.read_text().splitlines() == lines  # nothing downloaded again


def test_without_the_hub_knob_the_stand_in_loads_no_model(tmp_path: Path, project: Path) -> None:
    run_dir = _run_dir(tmp_path, project)
    done = _train(run_dir, HF_HOME=str(tmp_path / "hf"), FAKE_AXOLOTL_STEPS="1")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "hf").exists()
