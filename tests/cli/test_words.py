"""Messages say what is true, in words a user can act on: a total of runs that had no pod,
a job's directory on this machine, ``-C`` given after the command, a mistyped
``--version``, a path named from where the user is, the demo's missing extra."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from overbrainer.cli.main import main
from overbrainer.cli.runs_read import total_line
from overbrainer.events import types as ev
from overbrainer.events.aggregate import fold
from overbrainer.projections.spend import Spend
from overbrainer.projections.summary import summary_lines
from overbrainer.projections.words import shown_path
from overbrainer.testing.demo import install_hint

ROOT = Path(__file__).resolve().parents[2]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_total_of_runs_without_a_pod_says_none_had_one_not_what_runpod_billed() -> None:
    local = [Spend(), Spend()]
    assert total_line(local, "30d") == (
        "total $0.00 for 2 runs created in the last 30d: no Runpod pod among them"
    )
    assert total_line([Spend()], "7d").endswith("for 1 run created in the last 7d: no Runpod "
                                                "pod among it")  # fmt: skip
    billed = Spend(billed=0.42, pods=1, billed_pods=1)
    assert total_line([billed, Spend()], "30d") == (
        "total $0.42 for 2 runs created in the last 30d, all as Runpod billed it for its pod"
    )


@pytest.mark.parametrize(
    ("kind", "where", "said"),
    [
        ("local", "runs/20260101-100000-aaaa", "job dir runs/20260101-100000-aaaa"),
        ("ssh", "/srv/ob/runs/20260101-100000-aaaa", "remote dir /srv/ob/runs/"),
    ],
)
def test_a_run_on_this_machine_has_a_job_dir_and_only_a_remote_one_has_a_remote_dir(
    kind: str, where: str, said: str
) -> None:
    created = ev.RunCreated(
        run_id="20260101-100000-aaaa",
        target="here",
        kind=kind,
        remote_dir=where,
        settings_digest="d",
    )
    lines = summary_lines(fold([(created, "2026-01-01T10:00:00Z")]))
    assert lines[1].startswith(f"  target     here ({kind}), {said}")
    assert ("remote" in lines[1]) == (kind != "local")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["runs", "ls", "-C", "/elsewhere"], "`overbrainer -C /elsewhere runs ls`"),
        (["runs", "ls", "--last", "3", "-C/x y"], "`overbrainer -C '/x y' runs ls --last 3`"),
        (["events", "ab12", "--project", "p"], "`overbrainer -C p events ab12`"),
        (["runs", "ls", "-C"], "`overbrainer -C DIR runs ls …`"),
    ],
)
def test_c_after_the_command_says_it_goes_before_it_with_the_line_put_right(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code, out, err = _cli(capsys, "-C", str(tmp_path), *argv)
    assert (code, out) == (2, "")
    option = "--project" if "--project" in argv else "-C"
    assert err == f"error: {option} DIR goes before the command: {expected}\n"


def test_a_mistyped_version_is_named_an_unknown_option_with_a_did_you_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "-C", str(tmp_path), "--versoin")
    assert code == 2
    assert err == (
        "error: unknown option: --versoin (did you mean --version?); see `overbrainer --help`\n"
    )
    code, _, err = _cli(capsys, "-C", str(tmp_path), "rnus", "ls")
    assert code == 2
    assert err.startswith('error: unknown command "rnus" (did you mean "runs"?); the commands ')


def test_a_path_reads_from_the_project_inside_it_and_under_c_as_given_outside(
    tmp_path: Path,
) -> None:
    project = tmp_path / "proj"
    (project / "data").mkdir(parents=True)
    report = Path("runs/ab12/report.html")
    # In the project or below it: relative to the project, as every message names runs/.
    assert shown_path(Path(".") / report, Path("."), cwd=project) == str(report)
    assert shown_path(Path("..") / report, Path(".."), cwd=project / "data") == str(report)
    assert shown_path(project / report, project, cwd=project / "data") == str(report)
    # Elsewhere: under the project directory as -C gave it.
    assert shown_path(Path("proj") / report, Path("proj"), cwd=tmp_path) == f"proj/{report}"
    assert shown_path(project / report, project, cwd=tmp_path) == str(project / report)
    # A file outside the project (-o FILE) is named as it was given.
    assert shown_path(Path("../r.html"), Path("."), cwd=project) == "../r.html"


def test_runs_report_names_its_page_as_train_names_its_output(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "data").mkdir(parents=True)
    (project / "overbrainer.toml").write_text("")
    from overbrainer.events.actor import Actor
    from overbrainer.events.store import RunStore

    run_id = "20260101-100000-ab12"
    store = RunStore(None, project, Actor.here("test"))
    try:
        store.create(
            ev.RunCreated(
                run_id=run_id, target="t", kind="local", remote_dir=f"runs/{run_id}",
                settings_digest="d",
            )
        )  # fmt: skip
    finally:
        store.close()

    def report(cwd: Path, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "overbrainer", *args, "runs", "report", "ab12"],
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert report(project) == f"wrote runs/{run_id}/report.html\n"
    assert report(project / "data", "-C", "..") == f"wrote runs/{run_id}/report.html\n"
    assert report(tmp_path, "-C", "proj") == f"wrote proj/runs/{run_id}/report.html\n"


@pytest.mark.parametrize(
    ("prefix", "wheel", "expected"),
    [
        (
            "/home/u/.local/share/pipx/venvs/overbrainer",
            None,
            "pipx inject overbrainer 'hypercorn>=0.17' 'jsonschema>=4.23'",
        ),
        (
            "/home/u/.local/share/uv/tools/overbrainer",
            "/home/u/dist/overbrainer-1.0-py3-none-any.whl",
            "uv tool install --force '/home/u/dist/overbrainer-1.0-py3-none-any.whl[testing]'",
        ),
        (
            "/home/u/venv",
            None,
            "/home/u/venv/bin/python -m pip install 'hypercorn>=0.17' 'jsonschema>=4.23'",
        ),
    ],
)
def test_the_demo_names_a_command_that_installs_its_extra_where_it_runs(
    prefix: str, wheel: str | None, expected: str
) -> None:
    requirements = ["hypercorn>=0.17", "jsonschema>=4.23"]
    python = f"{prefix}/bin/python"
    hint = install_hint(requirements, Path(prefix), python, Path(wheel) if wheel else None)
    assert hint == expected
    assert "'overbrainer[testing]'" not in hint


def test_the_demo_without_its_extra_names_the_command_for_this_environment() -> None:
    probe = (
        "import sys\n"
        "sys.modules['hypercorn'] = None  # as if the extra were not installed\n"
        "from overbrainer.testing.demo import main\n"
        "sys.exit(main([]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 1
    assert done.stderr == (
        "error: the Runpod demo needs overbrainer's testing extra (hypercorn missing); "
        f"install it with: {sys.executable} -m pip install 'hypercorn>=0.17' "
        "'jsonschema>=4.23'\n"
    )
