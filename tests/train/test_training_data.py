"""Checking data/train.jsonl and data/eval.jsonl before a run."""

import json
from pathlib import Path

import pytest

from overbrainer.errors import OverbrainerError
from overbrainer.train.data import DataError, check_data
from tests.train.conftest import example, write_jsonl

SECRET = "sk-private-example-text"


def test_valid_project(project: Path) -> None:
    data = check_data(project)
    assert data.train_path == project / "data" / "train.jsonl"
    assert data.train_examples == 3
    assert data.reasoning_examples == 1
    assert data.eval_path is None
    assert data.eval_examples == 0
    assert not data.has_eval


def test_missing_train_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(OverbrainerError) as caught:
        check_data(tmp_path)
    message = str(caught.value)
    assert message.startswith("data/train.jsonl is missing")
    assert '"messages"' in message
    assert "overbrainer train" in message
    assert caught.value.exit_code == 1


@pytest.mark.parametrize("content", ["", "\n", "  \n\n"])
def test_empty_train_file_names_it(tmp_path: Path, content: str) -> None:
    path = tmp_path / "data" / "train.jsonl"
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(DataError, match=r"data/train\.jsonl is empty"):
        check_data(tmp_path)


def test_train_path_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "data" / "train.jsonl").mkdir(parents=True)
    with pytest.raises(DataError, match="is not a file"):
        check_data(tmp_path)


def test_bad_lines_are_reported_by_number_without_content(tmp_path: Path) -> None:
    path = tmp_path / "data" / "train.jsonl"
    path.parent.mkdir()
    lines = [
        json.dumps(example()),  # 1 ok
        "{" + SECRET,  # 2 not JSON
        json.dumps([SECRET]),  # 3 not an object
        json.dumps({"text": SECRET}),  # 4 no messages
        "",  # 5 blank: skipped
        json.dumps({"messages": []}),  # 6 empty messages
        json.dumps({"messages": [{"content": SECRET}]}),  # 7 no role
        json.dumps({"messages": [{"role": "user"}]}),  # 8 no content
        json.dumps({"messages": [{"role": "user", "content": 3}]}),  # 9 bad content
        json.dumps(  # 10 bad reasoning
            {"messages": [{"role": "assistant", "content": "x", "reasoning_content": [SECRET]}]}
        ),
        json.dumps({"messages": [{"role": "user", "content": "a"}, SECRET]}),  # 11
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as caught:
        check_data(tmp_path)
    message = str(caught.value)
    assert SECRET not in message
    # Only the first five are spelled out, each as file:line, one per line.
    assert message.splitlines() == [
        "data/train.jsonl:2: not valid JSON (Expecting property name enclosed in double "
        "quotes at column 2)",
        "data/train.jsonl:3: not a JSON object",
        'data/train.jsonl:4: "messages" must be a non-empty list of turns',
        'data/train.jsonl:6: "messages" must be a non-empty list of turns',
        'data/train.jsonl:7: message 1 has no "role" string',
        "data/train.jsonl: 4 more bad lines (9 in all)",
        "fix the data, then run `overbrainer train` again",
    ]


def test_each_kind_of_turn_problem(tmp_path: Path) -> None:
    path = tmp_path / "data" / "train.jsonl"
    rows = [
        {"messages": [{"role": "user"}]},
        {"messages": [{"role": "user", "content": 3}]},
        {"messages": [{"role": "assistant", "content": "x", "reasoning_content": 1}]},
        {"messages": [{"role": "user", "content": "a"}, "turn"]},
        {"messages": [{"role": " ", "content": "a"}]},
    ]
    write_jsonl(path, rows)
    with pytest.raises(DataError) as caught:
        check_data(tmp_path)
    message = str(caught.value)
    assert 'train.jsonl:1: message 1 has no "content"' in message
    assert 'train.jsonl:2: message 1 has a "content" that is neither' in message
    assert 'train.jsonl:3: message 1 has a "reasoning_content" that is not a string' in message
    assert "train.jsonl:4: message 2 is not an object" in message
    assert 'train.jsonl:5: message 1 has no "role" string' in message


@pytest.mark.parametrize(
    ("roles", "ok"),
    [
        (["user", "assistant"], True),
        (["system", "user", "assistant", "user", "assistant"], True),
        (["human", "gpt"], True),  # ShareGPT's names, which Axolotl maps
        (["user"], False),
        (["system", "user", "tool"], False),
        (["user", "Assistant"], False),  # roles are matched exactly
    ],
)
def test_an_example_needs_an_assistant_turn(tmp_path: Path, roles: list[str], ok: bool) -> None:
    turns = [{"role": role, "content": "x"} for role in roles]
    write_jsonl(tmp_path / "data" / "train.jsonl", [example(), {"messages": turns}])
    if ok:
        assert check_data(tmp_path).train_examples == 2
        return
    with pytest.raises(DataError) as caught:
        check_data(tmp_path)
    assert str(caught.value).startswith("data/train.jsonl:2: no assistant turn")


def test_content_may_be_a_list_of_parts(tmp_path: Path) -> None:
    parts = [{"type": "text", "text": "hello"}]
    write_jsonl(
        tmp_path / "data" / "train.jsonl",
        [{"messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": ""}]}],
    )
    assert check_data(tmp_path).train_examples == 1


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "data" / "train.jsonl"
    path.parent.mkdir()
    path.write_bytes(json.dumps(example()).encode() + b"\n\xff\xfe{}\n")
    with pytest.raises(DataError, match=r"train\.jsonl:2: not UTF-8 text"):
        check_data(tmp_path)


def test_crlf_lines_and_no_final_newline_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "data" / "train.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"\r\n".join(json.dumps(example()).encode() for _ in range(2)))
    assert check_data(tmp_path).train_examples == 2


def test_eval_set_is_optional(project: Path) -> None:
    assert check_data(project).eval_path is None
    (project / "data" / "eval.jsonl").write_text("")
    assert check_data(project).eval_path is None
    write_jsonl(project / "data" / "eval.jsonl", [example(), example()])
    data = check_data(project)
    assert data.eval_path == project / "data" / "eval.jsonl"
    assert data.eval_examples == 2
    assert data.has_eval


def test_bad_eval_and_train_are_reported_together(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("")
    (tmp_path / "data" / "eval.jsonl").write_text("nope\n")
    with pytest.raises(DataError) as caught:
        check_data(tmp_path)
    message = str(caught.value)
    assert message.splitlines()[:2] == [
        "data/train.jsonl is empty: put the training examples there, one JSON object per "
        'line, each with a "messages" list of {"role": ..., "content": ...} turns '
        '(reasoning, if any, in an assistant turn\'s "reasoning_content")',
        "data/eval.jsonl:1: not valid JSON (Expecting value at column 1)",
    ]
