"""``train --resume-from``'s decisions as tables (which checkpoint, which settings must
match), and its files: the checkpoints a run has at home, the one placed in a new run."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from overbrainer.errors import UsageError
from overbrainer.train.axolotl import place_checkpoint, prepare_run_dir, render_config
from overbrainer.train.resume import (
    ResumeError,
    ResumeFrom,
    mismatches,
    parse_spec,
    pick_checkpoint,
    refusal,
    shape_mismatch,
)
from overbrainer.train.resume_files import checkpoint_steps, trained_config
from tests.train.conftest import settings

RUN = "20260101-000000-ab12"


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        (RUN, (RUN, None)),
        (f"{RUN}:40", (RUN, 40)),
        ("ab12:7", ("ab12", 7)),
        ("runs/20260101-000000-ab12/", ("runs/20260101-000000-ab12/", None)),
    ],
)
def test_parse_spec(spec: str, want: tuple[str, int | None]) -> None:
    assert parse_spec(spec) == want


@pytest.mark.parametrize("spec", [f"{RUN}:", f"{RUN}:x", f"{RUN}:0", ":5", f"{RUN}:-3"])
def test_a_bad_spec_is_a_usage_error_naming_the_form(spec: str) -> None:
    with pytest.raises(UsageError, match=r"--resume-from takes RUN or RUN:STEP"):
        parse_spec(spec)


@pytest.mark.parametrize(
    ("available", "requested", "want"),
    [
        ([10, 30, 20], None, 30),  # the last
        ([10, 30, 20], 20, 20),
        ([7], 7, 7),
    ],
)
def test_pick_checkpoint(available: list[int], requested: int | None, want: int) -> None:
    assert pick_checkpoint(RUN, available, requested) == ResumeFrom(RUN, want)


@pytest.mark.parametrize(
    ("available", "requested", "message"),
    [
        ([], None, rf"run {RUN} has no checkpoint at home to resume from .*train stop RUN"),
        (
            [10, 20],
            15,
            rf"no checkpoint of step 15 at home \(it has 10, 20\).*--resume-from {RUN}`",
        ),
        ([], 15, r"no checkpoint of step 15 at home \(it has none at home\)"),
    ],
)
def test_pick_checkpoint_refuses_what_is_not_home(
    available: list[int], requested: int | None, message: str
) -> None:
    with pytest.raises(ResumeError, match=message):
        pick_checkpoint(RUN, available, requested)


@pytest.mark.parametrize(
    ("home", "volume", "requested", "want"),
    [
        ([10], [5, 10], None, ResumeFrom(RUN, 10)),  # the last, read from home
        ([10], [5, 10], 5, ResumeFrom(RUN, 5, at_home=False)),  # only on the volume
        ([], [5, 10], None, ResumeFrom(RUN, 10, at_home=False)),  # checkpoints_home "none"
        ([20], [5, 10], None, ResumeFrom(RUN, 20)),  # home's is newer
    ],
)
def test_a_checkpoint_on_the_volume_the_new_run_mounts_can_be_resumed_from(
    home: list[int], volume: list[int], requested: int | None, want: ResumeFrom
) -> None:
    assert pick_checkpoint(RUN, home, requested, on_volume=volume) == want


def test_a_step_neither_home_nor_on_the_volume_names_where_each_is() -> None:
    with pytest.raises(ResumeError) as refused:
        pick_checkpoint(RUN, [10], 7, on_volume=[5, 10])
    assert str(refused.value) == (
        f"run {RUN} has no checkpoint of step 7 at home or on the network volume (it has 10 "
        f"at home and 5 on the network volume): `overbrainer train --resume-from {RUN}` "
        "starts from its last"
    )


@pytest.mark.parametrize(
    ("available", "requested", "pruned", "message"),
    [
        (
            [30, 40],
            10,
            [10, 20],
            rf"checkpoint-10 of run {RUN} was removed from this machine \(only the last "
            r"\[training\] keep_checkpoints stay\): it has 30, 40; `overbrainer train "
            rf"--resume-from {RUN}` starts from its last",
        ),
        ([], 10, [10], r"was removed from this machine .*: it has none at home"),
        # Not pruned: the plain "not home" error.
        ([30, 40], 15, [10, 20], r"no checkpoint of step 15 at home \(it has 30, 40\)"),
    ],
)
def test_a_pruned_step_is_named_as_removed(
    available: list[int], requested: int, pruned: list[int], message: str
) -> None:
    with pytest.raises(ResumeError, match=message):
        pick_checkpoint(RUN, available, requested, pruned)


def test_a_pruned_step_still_home_is_taken() -> None:
    assert pick_checkpoint(RUN, [10, 40], 10, [10]) == ResumeFrom(RUN, 10)


BASE = render_config(settings(lora_r=8, lora_alpha=16, sequence_len=512), has_eval=True)


def _now(**changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"lora_r": 8, "lora_alpha": 16, "sequence_len": 512, **changes}
    return render_config(settings(**values), has_eval=False)


@pytest.mark.parametrize(
    ("now", "want"),
    [
        # what may change: how long and how it trains, the eval set, the device
        (_now(), []),
        (_now(epochs=7, learning_rate=1e-5, lr_scheduler="linear", micro_batch_size=8), []),
        (_now(gradient_accumulation_steps=2, saves_per_epoch=3, lora_dropout=0.2), []),
        (
            render_config(
                settings(lora_r=8, lora_alpha=16, sequence_len=512), has_eval=True, device="cpu"
            ),
            [],
        ),
        # what may not: each named, with both values
        (
            _now(lora_r=16),
            ["training.lora_r is 16 here but the checkpoint was trained with 8"],
        ),
        (
            _now(base_model="Qwen/Qwen3-1.7B"),
            [
                "training.base_model is 'Qwen/Qwen3-1.7B' here but the checkpoint was trained "
                "with 'Qwen/Qwen3-0.6B'"
            ],
        ),
        (
            _now(adapter="qlora"),
            ["training.adapter is 'qlora' here but the checkpoint was trained with 'lora'"],
        ),
        (
            _now(lora_alpha=32, sequence_len=1024),
            [
                "training.lora_alpha is 32 here but the checkpoint was trained with 16",
                "training.sequence_len is 1024 here but the checkpoint was trained with 512",
            ],
        ),
        (
            _now(axolotl_extra={"lora_target_modules": ["q_proj", "v_proj"]}),
            [
                "training.axolotl_extra.lora_target_modules is ['q_proj', 'v_proj'] here but "
                "the checkpoint was trained with (not set)"
            ],
        ),
    ],
)
def test_mismatches(now: dict[str, Any], want: list[str]) -> None:
    assert mismatches(BASE, now) == want


def test_a_full_fine_tune_differs_from_an_adapter_in_one_setting_and_its_shape() -> None:
    problems = mismatches(BASE, render_config(settings(adapter="full"), has_eval=False))
    assert problems[0] == (
        "training.adapter is 'full' here but the checkpoint was trained with 'lora'"
    )
    assert all("load_in_4bit" not in problem for problem in problems)


def test_the_refusal_names_every_setting_and_says_nothing_was_created() -> None:
    error = refusal(ResumeFrom(RUN, 40), ["training.lora_r is 16 here but …", "b"])
    text = str(error)
    assert text.startswith(f"cannot resume from checkpoint-40 of run {RUN}:")
    assert "  - training.lora_r is 16 here but …\n  - b\n" in text
    assert text.endswith("no run was created")


def _checkpoint(run_dir: Path, step: int, *, complete: bool = True) -> Path:
    folder = run_dir / "output" / f"checkpoint-{step}"
    (folder / "nested").mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"w" * step)
    (folder / "nested" / "rng_state.pth").write_bytes(b"r")
    if complete:
        (folder / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    return folder


def test_checkpoint_steps_are_the_complete_ones(tmp_path: Path) -> None:
    run_dir = tmp_path / "old"
    assert checkpoint_steps(run_dir) == []
    _checkpoint(run_dir, 20)
    _checkpoint(run_dir, 5)
    _checkpoint(run_dir, 30, complete=False)  # a save cut short
    (run_dir / "output" / "checkpoint-final").mkdir()
    (run_dir / "output" / "checkpoint-9").write_text("a file, not a checkpoint")
    assert checkpoint_steps(run_dir) == [5, 20]


def test_a_resumed_run_dir_holds_the_checkpoint_and_its_config_names_it(
    tmp_path: Path, project: Path
) -> None:
    old = tmp_path / "old"
    _checkpoint(old, 20)
    new = tmp_path / "new"
    prepare_run_dir(new, project, settings(), resume=(old, 20))
    placed = new / "resume" / "checkpoint-20"
    assert (placed / "adapter_model.safetensors").read_bytes() == b"w" * 20
    assert (placed / "nested" / "rng_state.pth").read_bytes() == b"r"
    assert (placed / "trainer_state.json").is_file()
    cfg = yaml.safe_load((new / "axolotl.yaml").read_text())
    assert cfg["resume_from_checkpoint"] == "./resume/checkpoint-20"
    assert cfg["output_dir"] == "./output"
    assert trained_config(new, "new")["resume_from_checkpoint"] == "./resume/checkpoint-20"
    # A fresh run has no such key.
    prepare_run_dir(tmp_path / "fresh", project, settings())
    assert "resume_from_checkpoint" not in yaml.safe_load(
        (tmp_path / "fresh" / "axolotl.yaml").read_text()
    )


def test_place_checkpoint_copies_where_it_cannot_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    old = tmp_path / "old"
    _checkpoint(old, 3)

    def cross_device(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    rel = place_checkpoint(old, 3, tmp_path / "new")
    assert rel == "resume/checkpoint-3"
    assert (tmp_path / "new" / rel / "adapter_model.safetensors").read_bytes() == b"www"


def test_trained_config_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ResumeError, match=rf"cannot read the config run {RUN} trained with"):
        trained_config(tmp_path, RUN)


@pytest.mark.parametrize(
    ("trained", "now", "said"),
    [
        ((1, None), (1, None), None),
        ((2, "ddp"), (2, "ddp"), None),
        ((None, "zero3"), (8, "zero3"), None),  # one per GPU: compared by its parallelism
        (
            (1, None),
            (2, "ddp"),
            "2 processes (ddp) here but the checkpoint was saved by a job of 1 process",
        ),
        (
            (2, "ddp"),
            (2, "zero2"),
            "(zero2) here but the checkpoint was saved by a job of 2 processes (ddp)",
        ),
        ((4, "fsdp"), (None, "fsdp"), None),
        (
            (None, "ddp"),
            (None, "zero3"),
            "(zero3) here but the checkpoint was saved by a job of one process per GPU (ddp)",
        ),
    ],
)
def test_a_checkpoint_goes_on_only_in_a_job_of_the_shape_that_saved_it(
    trained: tuple[int | None, str | None], now: tuple[int | None, str | None], said: str | None
) -> None:
    found = shape_mismatch(trained, now)
    if said is None:
        assert found is None
    else:
        assert found is not None and said in found
