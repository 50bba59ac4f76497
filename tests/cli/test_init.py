"""``overbrainer init``: a new project that passes ``config check`` as written, and never a
file overwritten."""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from overbrainer.cli.main import main
from overbrainer.config.load import load_settings
from overbrainer.config.model import (
    RUNPOD_DEFAULT_IMAGE,
    LocalTarget,
    RunpodSettings,
    RunpodTarget,
    SshTarget,
    StoreSettings,
    TrainingSettings,
)
from overbrainer.config.template import OVERBRAINER_TOML, project_files

FILES = ["overbrainer.toml", ".env.example", ".gitignore", "data/train.jsonl", "data/eval.jsonl"]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.upper().startswith("OVERBRAINER_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_init_writes_a_project_that_checks_clean(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "new"
    assert main(["-C", str(project), "init"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    for relative in FILES:
        assert (project / relative).is_file()
        assert f"wrote {project / relative}" in out
    assert "next:" in out and "config check" in out
    assert (project / "data" / "eval.jsonl").read_text() == ""
    assert (project / ".gitignore").read_text().split() == [
        "#", "overbrainer:", "runs", "and", "their", "results,", "the", "event", "log,",
        "and", "secrets.", "runs/", ".overbrainer/", ".env",
    ]  # fmt: skip

    assert main(["-C", str(project), "config", "check", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    report = json.loads(out)
    training = report["settings"]["training"]
    assert (training["target"], training["adapter"]) == ("local", "lora")
    # A native target: no container engine or image shown (only docker reads them).
    assert report["settings"]["targets"] == {
        "local": {
            "kind": "local", "runtime": "native", "venv": None, "device": "auto", "processes": None
        }
    }  # fmt: skip


def test_init_takes_a_directory_relative_to_dash_c(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-C", str(tmp_path), "init", "sub/proj"]) == 0
    capsys.readouterr()
    assert (tmp_path / "sub" / "proj" / "overbrainer.toml").is_file()


def test_init_never_overwrites(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "p"
    (project / "data").mkdir(parents=True)
    (project / "overbrainer.toml").write_text("# mine\n")
    (project / "data" / "train.jsonl").write_text('{"mine": true}\n')
    (project / ".gitignore").write_text("node_modules/\n")
    assert main(["-C", str(project), "init"]) == 0
    out, err = capsys.readouterr()
    assert (project / "overbrainer.toml").read_text() == "# mine\n"
    assert (project / "data" / "train.jsonl").read_text() == '{"mine": true}\n'
    assert (project / ".gitignore").read_text() == "node_modules/\n"
    assert f"kept {project / 'overbrainer.toml'} (it exists; not overwritten)" in out
    assert f"kept {project / 'data' / 'train.jsonl'}" in out
    assert f"wrote {project / '.env.example'}" in out
    assert f"wrote {project / 'data' / 'eval.jsonl'}" in out
    assert "warning:" in err and "does not list .env" in err

    # A second init changes nothing at all.
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    assert main(["-C", str(project), "init"]) == 0
    assert "wrote" not in capsys.readouterr().out
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before


def test_init_refuses_a_file_as_directory(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("x")
    assert main(["-C", str(tmp_path), "init", "f"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is a file, not a directory" in err


def test_init_in_a_real_process(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("OVERBRAINER_")}
    done = subprocess.run(
        [sys.executable, "-m", "overbrainer", "init", str(tmp_path / "p")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "overbrainer", "-C", str(tmp_path / "p"), "config", "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Qwen/Qwen3-0.6B" in done.stdout


def test_example_data_is_chat_format_with_reasoning() -> None:
    lines = project_files()["data/train.jsonl"].splitlines()
    assert len(lines) >= 3
    for line in lines:
        row = json.loads(line)
        assert set(row) == {"messages"}
        user, assistant = row["messages"]
        assert user["role"] == "user" and user["content"]
        assert assistant["role"] == "assistant" and assistant["content"]
        assert assistant["reasoning_content"]


def test_env_example_says_where_the_store_password_comes_from_as_the_code_does(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    from overbrainer.cli.common import store_url
    from overbrainer.cli.context import Invocation
    from overbrainer.events.pg import parse_url

    text = project_files()[".env.example"]
    assert "with its password" not in text
    for source in ("PGPASSWORD", "?service=", "~/.pgpass"):
        assert source in text, source
    assert "never" in text and "overbrainer.toml" in text
    # Filled in as it says: the URL without a password, PGPASSWORD beside it in .env.
    canary = "pg-CANARY-5e1d"
    filled = text.replace("# OVERBRAINER_STORE__URL=", "OVERBRAINER_STORE__URL=").replace(
        "# PGPASSWORD=", f"PGPASSWORD={canary}"
    )
    (tmp_path / "overbrainer.toml").write_text(OVERBRAINER_TOML)
    (tmp_path / ".env").write_text(filled)
    clean_env.delenv("PGPASSWORD", raising=False)
    invocation = Invocation(tmp_path, "test", base_environ={})
    url = store_url(invocation)
    assert url == "postgresql://you@db.example.com/overbrainer"
    target = parse_url(url, invocation.environ())
    assert (target.password, target.password_origin) == (canary, "PGPASSWORD")
    # The template's [store] comment agrees: never a password in the file.
    store = OVERBRAINER_TOML.split("# [store]")[1].split("# [runpod]")[0]
    assert "never a password here" in store and "PGPASSWORD" in store


def test_the_template_says_what_bounds_a_pod_and_what_does_not() -> None:
    block = OVERBRAINER_TOML.split("# max_hours = 4")[1].split("# image =")[0]
    words = " ".join(line.strip("# ") for line in block.splitlines())
    assert "whatever happens" not in words
    assert "watchdog" in words and "--keep-pod" in words and "overbrainer pod rm" in words


def test_env_example_names_only_env_only_variables(tmp_path: Path) -> None:
    text = project_files()[".env.example"]
    active = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert active == ["OVERBRAINER_RUNPOD__API_KEY=", "OVERBRAINER_HF_TOKEN="]
    assert "OVERBRAINER_TARGETS__BOX__HOST=" in text
    # Copied as it is to .env, it changes nothing and breaks nothing.
    (tmp_path / "overbrainer.toml").write_text(OVERBRAINER_TOML)
    from overbrainer.config.dotenv import read_dotenv

    (tmp_path / ".env").write_text(text)
    settings = load_settings(tmp_path, read_dotenv(tmp_path / ".env"))
    assert settings.runpod.api_key is None and settings.hf_token is None


@pytest.mark.parametrize(
    ("model", "skip"),
    [
        (TrainingSettings, set()),
        (LocalTarget, set()),
        (SshTarget, {"host"}),
        (RunpodTarget, set()),
        (StoreSettings, set()),
        (RunpodSettings, {"api_key", "s3_access_key", "s3_secret"}),
    ],
)
def test_template_documents_every_key(model: type, skip: set[str]) -> None:
    for key in set(model.model_fields) - skip:
        assert re.search(rf"^#? ?({key} = |\[training\.{key}\])", OVERBRAINER_TOML, re.M), key


def _uncomment(text: str, first: str) -> str:
    """The commented block that starts with the line ``first``, uncommented."""
    lines = text.splitlines()
    start = lines.index(first)
    block: list[str] = []
    for line in lines[start:]:
        if not line.startswith("#") or line == "#":
            break
        block.append(line[2:] if line.startswith("# ") else line[1:])
    return "\n".join(block) + "\n"


def test_template_examples_are_valid_when_uncommented(tmp_path: Path) -> None:
    text = OVERBRAINER_TOML
    extra = "".join(
        _uncomment(text, first)
        for first in (
            "# [training.axolotl_extra]",
            "# [training.env]",
            "# [targets.box]",
            "# [targets.gpu_cloud]",
            "# [targets.gpu_auto]",
            "# [store]",
            "# [runpod]",
        )
    )
    training = _uncomment(
        text,
        "# epochs = 3                          # passes over data/train.jsonl; a whole number >= 1",
    )
    text = text.replace("\n[targets.local]", training + "\n[targets.local]")
    text = (text + extra).replace("<64 hex digits>", "0" * 64).replace("<volume id>", "vol1")
    tomllib.loads(text)
    (tmp_path / "overbrainer.toml").write_text(text)
    settings = load_settings(tmp_path, {})
    assert isinstance(settings.targets["box"], SshTarget)
    gpu = settings.targets["gpu_cloud"]
    assert isinstance(gpu, RunpodTarget)
    assert gpu.gpu_types == ["NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000"]
    assert gpu.image == RUNPOD_DEFAULT_IMAGE  # the example shown is the default
    assert gpu.max_cost_usd == 10
    auto = settings.targets["gpu_auto"]
    assert isinstance(auto, RunpodTarget) and auto.gpu_types == "auto"
    assert (auto.min_vram_gb, auto.max_price_per_hour) == (40, 1.5)
    box = settings.targets["box"]
    assert isinstance(box, SshTarget) and box.workdir == "overbrainer"
    assert settings.store.is_postgres
    # The defaults written in the comments are the defaults in the code.
    defaults = TrainingSettings(target="local", base_model="m", adapter="lora")
    for key in set(TrainingSettings.model_fields) - {
        "target", "base_model", "adapter", "hub_model_id", "axolotl_extra", "env"
    }:  # fmt: skip
        assert getattr(settings.training, key) == getattr(defaults, key), key
    assert settings.training.axolotl_extra == {"chat_template": "tokenizer_default", "bf16": "auto"}
    assert settings.training.env == {"HF_HOME": "/scratch/hf", "TOKENIZERS_PARALLELISM": "false"}
