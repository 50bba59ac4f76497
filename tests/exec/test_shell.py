"""Quoting and validation: what goes into a shell command comes out unchanged."""

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overbrainer.exec.base import ContainerRuntime, NativeRuntime
from overbrainer.exec.job import parse_pid, parse_state, render_commands
from overbrainer.exec.shell import (
    UnsafeValue,
    build_command,
    check_container_name,
    check_env_name,
    check_rel_path,
    check_safe_word,
    quote,
)

_printable = st.text(
    st.characters(exclude_characters="\n\r\0", exclude_categories=["Cs"]), max_size=40
)


@settings(max_examples=25, deadline=None)
@given(st.lists(_printable, min_size=1, max_size=4))
def test_a_built_command_reaches_the_program_word_for_word(words: list[str]) -> None:
    line = build_command(["printf", r"%s\0", *words], name="test command")
    out = subprocess.run(["sh", "-c", line], capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == words


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\0b"])
def test_line_breaks_and_nul_are_refused_by_name(bad: str) -> None:
    with pytest.raises(UnsafeValue) as caught:
        quote("hunter2" + bad, name="the secret HF_TOKEN")
    assert "the secret HF_TOKEN" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    with pytest.raises(UnsafeValue, match="training command 2, word 3"):
        build_command(["axolotl", "train", "x" + bad], name="training command 2")


def test_an_empty_command_is_refused() -> None:
    with pytest.raises(UnsafeValue, match="empty"):
        build_command([], name="training command 1")


@pytest.mark.parametrize("path", ["runs/20260101-120000-ab12", "a", "a/b.c/d-e_f"])
def test_safe_relative_paths(path: str) -> None:
    assert check_rel_path(path, name="p") == path


@pytest.mark.parametrize(
    "path", ["", "/abs", "../x", "a/../b", "a//b", "./a", "a/", "-x", "a b", "a'b", "a;b", "$x"]
)
def test_unsafe_relative_paths(path: str) -> None:
    with pytest.raises(UnsafeValue):
        check_rel_path(path, name="the run directory")


@pytest.mark.parametrize("word", ["/workspace/axolotl-venv", "img@sha256:ab", "ghcr.io/a/b:1"])
def test_safe_words(word: str) -> None:
    assert check_safe_word(word, name="w") == word


@pytest.mark.parametrize("word", ["", "-rf", "a b", "a/../b", "x`y`", 'a"b'])
def test_unsafe_words(word: str) -> None:
    with pytest.raises(UnsafeValue):
        check_safe_word(word, name="the image")


def test_names() -> None:
    assert check_env_name("HF_TOKEN", name="n") == "HF_TOKEN"
    for bad in ("1A", "A-B", "", "A B", "A\nB"):
        with pytest.raises(UnsafeValue):
            check_env_name(bad, name="a secret's name")
    assert check_container_name("overbrainer-r1.x_2") == "overbrainer-r1.x_2"
    for bad in ("-x", "", "a b", "a/b"):
        with pytest.raises(UnsafeValue):
            check_container_name(bad)


def test_job_commands_file() -> None:
    text = render_commands(
        [["axolotl", "train", "axolotl.yaml"], ["axolotl", "merge-lora", "axolotl.yaml"]],
        env={"OVERBRAINER_METRICS": "metrics.jsonl", "QUOTE": "it's"},
        secret_names=["HF_TOKEN"],
        runtime=NativeRuntime(venv="/opt/venv/"),
        container=None,
    )
    assert text.splitlines()[1:] == [
        "OVERBRAINER_METRICS='metrics.jsonl'",
        "export OVERBRAINER_METRICS",
        "QUOTE='it'\\''s'",
        "export QUOTE",
        "PATH='/opt/venv/bin':\"$PATH\"",
        "VIRTUAL_ENV='/opt/venv'",
        "export PATH VIRTUAL_ENV",
        "'axolotl' 'train' 'axolotl.yaml' || exit $?",
        "'axolotl' 'merge-lora' 'axolotl.yaml' || exit $?",
    ]
    podman = render_commands(
        [["axolotl", "train", "axolotl.yaml"]],
        env={},
        secret_names=["HF_TOKEN"],
        runtime=ContainerRuntime("podman", "quay.io/x/axolotl:1", extra_args=("--shm-size=8g",)),
        container="overbrainer-r1",
    )
    assert podman.splitlines()[-1] == (
        "'podman' 'run' '--rm' '--name' 'overbrainer-r1' '-e' 'HF_TOKEN' '--device'"
        " 'nvidia.com/gpu=all' '--shm-size=8g' -v \"$PWD:$PWD\" -w \"$PWD\""
        " 'quay.io/x/axolotl:1' 'axolotl' 'train' 'axolotl.yaml' || exit $?"
    )


def test_script_answers_are_parsed_strictly() -> None:
    assert parse_state("exited 0\n", where="w").exit_code == 0
    assert parse_state("exited ?\n", where="w").exit_code is None
    assert parse_state("lost\n", where="w").status == "lost"
    assert parse_pid("pid 4242\n", where="w") == 4242
    from overbrainer.exec.base import ExecError

    for bad in ("", "alive", "exited", "running extra"):
        with pytest.raises(ExecError):
            parse_state(bad, where="w")
    for bad in ("", "pid", "pid 1", "pid x", "4242"):
        with pytest.raises(ExecError):
            parse_pid(bad, where="w")
