"""The metrics plugin: its line format and its callback, driven with fake trainer states."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from overbrainer.train import overbrainer_metrics
from overbrainer.train.metrics import MetricsEvent, parse_metrics_lines
from overbrainer.train.overbrainer_metrics import (
    MetricsCallback,
    OverbrainerMetricsPlugin,
    metrics_line,
    new_callback,
)


class _Tensor:
    """Stands for a 0-d tensor: a number behind ``.item()``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


def _state(step: int = 0, *, main: bool | None = True, max_steps: int = 10) -> SimpleNamespace:
    state = SimpleNamespace(global_step=step, epoch=step / max_steps, max_steps=max_steps)
    if main is not None:
        state.is_world_process_zero = main
    return state


def _events(path: Path) -> list[MetricsEvent]:
    events, malformed, consumed = parse_metrics_lines(path.read_bytes())
    assert malformed == 0
    assert consumed == path.stat().st_size
    return events


def test_metrics_line_format() -> None:
    line = metrics_line("log", time=1700000000.123456, step=3, epoch=0.5, loss=1.25, note=None)
    assert line.endswith("\n")
    assert line.count("\n") == 1
    assert json.loads(line) == {
        "event": "log",
        "time": 1700000000.123,
        "step": 3,
        "epoch": 0.5,
        "loss": 1.25,
    }
    assert line.startswith('{"event":"log","time":')


def test_metrics_line_stamps_the_time() -> None:
    record = json.loads(metrics_line("begin", max_steps=4))
    assert record["event"] == "begin"
    assert isinstance(record["time"], float)
    assert record["time"] > 1.6e9


def test_metrics_line_plain_values() -> None:
    record = json.loads(
        metrics_line("log", time=1, loss=_Tensor(0.5), grad_norm=math.nan, other=object())
    )
    assert record["loss"] == 0.5
    assert record["grad_norm"] == "NaN"
    assert "other" not in record
    infinite = json.loads(metrics_line("log", time=1, loss=math.inf, eval_loss=-math.inf))
    assert (infinite["loss"], infinite["eval_loss"]) == ("Infinity", "-Infinity")


def test_callback_writes_begin_and_log_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    callback = MetricsCallback(path)
    callback.on_train_begin(None, _state(), None)
    callback.on_log(
        None,
        _state(2),
        None,
        logs={"loss": 1.5, "learning_rate": 2e-4, "grad_norm": _Tensor(0.75), "epoch": 0.2},
    )
    callback.on_log(None, _state(2), None, logs={"eval_loss": 1.75, "eval_runtime": 3.0})
    begin, log, evaluation = _events(path)
    assert begin.event == "begin"
    assert begin.max_steps == 10
    assert begin.time is not None
    assert (log.event, log.step, log.epoch, log.max_steps) == ("log", 2, 0.2, 10)
    assert (log.loss, log.learning_rate, log.grad_norm) == (1.5, 2e-4, 0.75)
    assert log.eval_loss is None
    assert evaluation.eval_loss == 1.75
    assert evaluation.loss is None
    # Trainer values other than the four known ones stay out of the file.
    assert "eval_runtime" not in path.read_text()


def test_callback_writes_on_the_main_process_only(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    callback = MetricsCallback(path)
    callback.on_train_begin(None, _state(main=False), None)
    callback.on_log(None, _state(1, main=False), None, logs={"loss": 1.0})
    assert not path.exists()
    callback.on_log(None, _state(1, main=True), None, logs={"loss": 1.0})
    assert [event.step for event in _events(path)] == [1]


@pytest.mark.parametrize(
    ("env", "writes"),
    [
        ({}, True),
        ({"RANK": "0"}, True),
        ({"RANK": "1"}, False),
        ({"LOCAL_RANK": "2"}, False),
        ({"LOCAL_RANK": "0"}, True),
        ({"RANK": "3", "LOCAL_RANK": "0"}, False),
    ],
)
def test_rank_from_the_environment_without_a_state_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], writes: bool
) -> None:
    for name in ("RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "metrics.jsonl"
    MetricsCallback(path).on_train_begin(None, _state(main=None), None)
    assert path.exists() is writes


def test_path_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "elsewhere.jsonl"
    monkeypatch.setenv("OVERBRAINER_METRICS", str(path))
    callback = new_callback()
    callback.on_train_begin(None, _state(), None)
    assert [event.event for event in _events(path)] == ["begin"]


def test_default_path_is_metrics_jsonl_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OVERBRAINER_METRICS", raising=False)
    monkeypatch.chdir(tmp_path)
    MetricsCallback().on_train_begin(None, _state(), None)
    assert len(_events(tmp_path / "metrics.jsonl")) == 1


def test_unwritable_metrics_file_never_stops_training(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    callback = MetricsCallback(tmp_path / "missing-dir" / "metrics.jsonl")
    callback.on_train_begin(None, _state(), None)
    callback.on_log(None, _state(1), None, logs={"loss": 1.0})
    warnings = [r for r in caplog.records if r.name == "overbrainer_metrics"]
    assert len(warnings) == 1
    assert "cannot append to the metrics file" in warnings[0].getMessage()


def test_appends_to_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(metrics_line("begin", time=1, max_steps=3))
    MetricsCallback(path).on_log(None, _state(1, max_steps=3), None, logs={"loss": 2.0})
    assert [event.event for event in _events(path)] == ["begin", "log"]


def test_plugin_returns_the_callback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVERBRAINER_METRICS", str(tmp_path / "m.jsonl"))
    callbacks = OverbrainerMetricsPlugin().add_callbacks_pre_trainer(cfg={}, model=None)
    assert len(callbacks) == 1
    callbacks[0].on_log(None, _state(4), None, logs={"loss": 0.5})
    assert [event.loss for event in _events(tmp_path / "m.jsonl")] == [0.5]


def test_run_dir_copy_imports_standalone(tmp_path: Path) -> None:
    # The copy in a run directory is imported as a top-level module by a Python that may
    # have neither overbrainer nor axolotl nor transformers installed.
    copy = tmp_path / "overbrainer_metrics.py"
    copy.write_bytes(Path(overbrainer_metrics.__file__).read_bytes())
    script = (
        "import sys; sys.modules['overbrainer'] = None\n"
        "import overbrainer_metrics as m\n"
        "assert m.OverbrainerMetricsPlugin.__mro__[1] is object\n"
        "cb = m.OverbrainerMetricsPlugin().add_callbacks_pre_trainer(None, None)[0]\n"
        "cb.on_train_begin(None, type('S', (), {'max_steps': 7})(), None)\n"
    )
    env = {"PYTHONPATH": ".", "OVERBRAINER_METRICS": "out.jsonl", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    (begin,) = _events(tmp_path / "out.jsonl")
    assert begin.max_steps == 7


def test_plugin_subclasses_axolotl_base_when_installed(tmp_path: Path) -> None:
    # A minimal stand-in package for axolotl.integrations.base and transformers.
    base = tmp_path / "axolotl" / "integrations"
    base.mkdir(parents=True)
    (tmp_path / "axolotl" / "__init__.py").write_text("")
    (base / "__init__.py").write_text("")
    (base / "base.py").write_text("class BasePlugin:\n    def register(self, cfg):\n        pass\n")
    (tmp_path / "transformers.py").write_text(
        "class TrainerCallback:\n"
        "    def on_log(self, args, state, control, **kwargs):\n"
        "        raise AssertionError('the no-op base method must not win')\n"
    )
    module_path = Path(overbrainer_metrics.__file__)
    sys.path.insert(0, str(tmp_path))
    try:
        spec = importlib.util.spec_from_file_location("overbrainer_metrics_probe", module_path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        plugin = module.OverbrainerMetricsPlugin()
        assert type(plugin).__mro__[1].__module__ == "axolotl.integrations.base"
        callback = plugin.add_callbacks_pre_trainer(None, None)[0]
        assert type(callback).__mro__[2].__module__ == "transformers"
        callback.path = tmp_path / "m.jsonl"
        callback.on_log(None, _state(1), None, logs={"loss": 3.0})
        assert [event.loss for event in _events(tmp_path / "m.jsonl")] == [3.0]
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "transformers" or n.startswith("axolotl")]:
            del sys.modules[name]


@pytest.mark.parametrize(
    ("cfg", "phase"),
    [
        ({"adapter": "lora"}, "saving_adapter"),
        ({"adapter": "qlora"}, "saving_adapter"),
        ({"adapter": None}, "saving_model"),
        ({}, "saving_model"),
        (SimpleNamespace(adapter="lora"), "saving_adapter"),
        (SimpleNamespace(), "saving_model"),
    ],
)
def test_train_end_writes_what_is_saved_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cfg: object, phase: str
) -> None:
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("OVERBRAINER_METRICS", str(path))
    (callback,) = OverbrainerMetricsPlugin().add_callbacks_pre_trainer(cfg, None)
    callback.on_train_end(None, _state(10), None)
    callback.on_train_end(None, _state(10, main=False), None)  # only the main process writes
    events = _events(path)
    assert [(e.event, e.phase) for e in events] == [("phase", phase)]


def _control() -> SimpleNamespace:
    return SimpleNamespace(should_save=False, should_training_stop=False)


def test_a_stop_request_saves_a_checkpoint_at_the_next_step_and_stops(tmp_path: Path) -> None:
    path, request = tmp_path / "metrics.jsonl", tmp_path / "stop_request"
    callback = MetricsCallback(path, stop_path=request)
    control = _control()
    callback.on_step_end(None, _state(3), control)
    callback.on_save(None, _state(3), control)  # a save of the schedule's own
    assert (control.should_save, control.should_training_stop) == (False, False)
    assert [(e.event, e.step) for e in _events(path)] == [("saved", 3)]
    request.touch()
    callback.on_step_end(None, _state(4), control)
    assert (control.should_save, control.should_training_stop) == (True, True)
    callback.on_save(None, _state(4), control)
    _, saved, stopped = _events(path)
    assert (saved.event, saved.step) == ("saved", 4)
    assert (stopped.event, stopped.step) == ("stopped", 4)
    # Acted on once: a later look changes nothing and says nothing more.
    again = _control()
    callback.on_step_end(None, _state(5), again)
    assert (again.should_save, again.should_training_stop) == (False, False)


def test_every_save_is_announced_once_written_by_the_main_process_only(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    callback = MetricsCallback(path)
    callback.on_save(None, _state(50), _control())
    callback.on_save(None, _state(50, main=False), _control())  # another rank: silent
    callback.on_save(None, _state(100), _control())
    assert [(e.event, e.step) for e in _events(path)] == [("saved", 50), ("saved", 100)]


def test_the_request_is_looked_for_never_read(tmp_path: Path) -> None:
    # A FIFO with no writer: opening it to read would block the trainer for ever.
    request = tmp_path / "stop_request"
    os.mkfifo(request)
    callback = MetricsCallback(tmp_path / "metrics.jsonl", stop_path=request)
    control = _control()
    callback.on_step_end(None, _state(1), control)
    assert control.should_training_stop is True


def test_the_request_file_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OVERBRAINER_STOP", str(tmp_path / "elsewhere"))
    assert MetricsCallback(tmp_path / "m").stop_path == str(tmp_path / "elsewhere")
    monkeypatch.delenv("OVERBRAINER_STOP")
    monkeypatch.chdir(tmp_path)
    callback = MetricsCallback(tmp_path / "m")
    assert callback.stop_path == "stop_request"  # the job's directory
    (tmp_path / "stop_request").touch()
    control = _control()
    callback.on_step_end(None, _state(1), control)
    assert control.should_save is True


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"deadline\n", "deadline"), (b"cost_cap", "cost_cap"), (b"", None), (b"rm -rf /\n", None)],
)
def test_the_stopped_line_carries_the_reason_the_request_holds(
    tmp_path: Path, content: bytes, reason: str | None
) -> None:
    path, request = tmp_path / "metrics.jsonl", tmp_path / "stop_request"
    request.write_bytes(content)
    callback = MetricsCallback(path, stop_path=request)
    control = _control()
    callback.on_step_end(None, _state(6), control)
    callback.on_save(None, _state(6), control)
    saved, stopped = _events(path)
    assert (saved.event, saved.step) == ("saved", 6)
    assert (stopped.event, stopped.step, stopped.reason) == ("stopped", 6, reason)


class _TwoRanks:
    """``torch.distributed`` as two ranks of one job see it, the ranks being two threads of
    this process: a barrier holds each until both reached it."""

    def __init__(self) -> None:
        import threading

        self._barrier = threading.Barrier(2, timeout=10)
        self.distributed = self

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_world_size(self) -> int:
        return 2

    def barrier(self) -> None:
        self._barrier.wait()


def test_a_checkpoint_is_announced_only_once_the_rank_that_writes_late_has_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    monkeypatch.setitem(sys.modules, "torch", _TwoRanks())
    metrics = tmp_path / "metrics.jsonl"
    late_part = tmp_path / "checkpoint-5" / "rng_state_1.pth"
    late_part.parent.mkdir()
    seen_at_announcement: list[bool] = []
    write = overbrainer_metrics.append_line

    def append_line(path: str, line: str) -> None:
        if '"saved"' in line:
            seen_at_announcement.append(late_part.exists())
        write(path, line)

    monkeypatch.setattr(overbrainer_metrics, "append_line", append_line)

    def rank(number: int) -> None:
        if number == 1:
            time.sleep(0.5)  # this rank's save takes longer than rank 0's
            late_part.write_bytes(b"rng")
        MetricsCallback(metrics).on_save(None, _state(5, main=number == 0), SimpleNamespace())

    threads = [threading.Thread(target=rank, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert seen_at_announcement == [True]
    events, _, _ = parse_metrics_lines(metrics.read_bytes())
    assert [(e.event, e.step) for e in events] == [("saved", 5)]


def test_one_process_announces_a_checkpoint_with_no_barrier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = _TwoRanks()
    torch.get_world_size = lambda: 1  # type: ignore[method-assign]
    torch.barrier = lambda: pytest.fail("one process waited at a barrier")  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "torch", torch)
    metrics = tmp_path / "metrics.jsonl"
    MetricsCallback(metrics).on_save(None, _state(3), SimpleNamespace())
    assert '"saved"' in metrics.read_text()


@pytest.mark.parametrize(("rank", "flag", "writes"), [("1", True, False), ("0", False, True)])
def test_the_launchers_rank_decides_over_the_trainers_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rank: str, flag: bool, writes: bool
) -> None:
    monkeypatch.setenv("RANK", rank)
    path = tmp_path / "metrics.jsonl"
    MetricsCallback(path).on_train_begin(None, _state(main=flag), None)
    assert path.exists() is writes


@pytest.mark.parametrize(("rank", "skipped"), [("1", True), ("0", False), (None, False)])
def test_only_rank_0_writes_the_model_card(
    monkeypatch: pytest.MonkeyPatch, rank: str | None, skipped: bool
) -> None:
    monkeypatch.delenv("RANK", raising=False)
    if rank is not None:
        monkeypatch.setenv("RANK", rank)
    written: list[str] = []
    trainer = SimpleNamespace(
        state=_state(main=True), create_model_card=lambda **kw: written.append("card")
    )
    OverbrainerMetricsPlugin().post_trainer_create({}, trainer)
    trainer.create_model_card(model_name="output")
    assert written == ([] if skipped else ["card"])


def test_a_model_card_that_cannot_be_written_is_a_warning_on_rank_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RANK", "0")

    def fails(**kwargs: object) -> None:
        raise KeyError("Reserved (gib)")

    trainer = SimpleNamespace(state=_state(main=True), create_model_card=fails)
    OverbrainerMetricsPlugin().post_trainer_create({}, trainer)
    trainer.create_model_card(model_name="output")  # no error: the run goes on
    assert "the model card (README.md) was not written: KeyError('Reserved (gib)')" in (
        capsys.readouterr().err
    )
