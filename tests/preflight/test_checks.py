"""The preflight's pure core: facts in, verdicts and one-line problems out, as tables."""

from pathlib import Path

import pytest

from overbrainer.config.model import RUNPOD_DEFAULT_IMAGE
from overbrainer.preflight.checks import (
    ApiFailure,
    Check,
    DirFact,
    Report,
    Verdict,
    config_check,
    data_check,
    engine_check,
    gpu_types_check,
    host_check,
    image_check,
    project_dirs_check,
    runpod_key_check,
    skipped,
    trainer_check,
)
from overbrainer.preflight.probes import EngineProbe, TrainerProbe
from overbrainer.runpod.models import GpuType
from overbrainer.train.data import DataFiles, DataReport

PINNED = "ghcr.io/x/axolotl:1@sha256:" + "a" * 64


def gpu(gpu_id: str, name: str, *, secure: bool = True, most: int | None = 8) -> GpuType:
    return GpuType(
        id=gpu_id, name=name, manufacturer="NVIDIA", memory_gb=48, secure=secure,
        community=True, price_secure=0.4, price_community=0.3, max_count_secure=most,
        max_count_community=most,
    )  # fmt: skip


CATALOG = [
    gpu("NVIDIA GeForce RTX 4090", "RTX 4090"),
    gpu("NVIDIA A40", "A40", most=10),
    gpu("NVIDIA RTX A6000", "RTX A6000"),
    gpu("NVIDIA L40S", "L40S", secure=False),
    gpu("NVIDIA H100 80GB HBM3", "H100 SXM", most=2),
]


def test_configuration_problems_are_listed_as_they_are() -> None:
    bad = config_check("overbrainer.toml", ["training.epochs: must be >= 1", "x: y"], None)
    assert (bad.verdict, bad.problems) == (
        Verdict.problem,
        ("training.epochs: must be >= 1", "x: y"),
    )
    assert bad.summary == "overbrainer.toml: 2 problems"
    good = config_check("overbrainer.toml", [], "target gpu (runpod)")
    assert (good.verdict, good.summary) == (Verdict.ok, "overbrainer.toml: target gpu (runpod)")


def test_data_verdicts() -> None:
    files = DataFiles(Path("t"), Path("e"), 64, 8, 60)
    assert data_check(DataReport(files, ())).summary == (
        "data/train.jsonl: 64 examples (60 with reasoning); data/eval.jsonl: 8 examples"
    )
    alone = DataFiles(Path("t"), None, 1, 0, 0)
    assert data_check(DataReport(alone, ())).summary.endswith("; no eval set")
    problems = ("data/train.jsonl:2: not valid JSON", "data/eval.jsonl is not a file")
    bad = data_check(DataReport(None, problems))
    assert (bad.verdict, bad.problems, bad.summary) == (
        Verdict.problem,
        problems,
        "data files: 2 problems",
    )


@pytest.mark.parametrize(
    ("probe", "verdict", "words"),
    [
        (TrainerProbe("/v/bin/axolotl", "ok", "/v/bin/axolotl", "/v/bin/python"), Verdict.ok,
         "/v/bin/axolotl on host box (interpreter /v/bin/python starts)"),
        (TrainerProbe("/v/bin/axolotl", "ok", "/v/bin/axolotl"), Verdict.ok,
         "/v/bin/axolotl on host box"),
        (TrainerProbe("/v/bin/axolotl", "missing"), Verdict.problem,
         "/v/bin/axolotl does not exist on host box: install Axolotl in that venv (pip install "
         "axolotl), or set targets.box.venv to the venv that holds bin/axolotl"),
        (TrainerProbe("axolotl", "missing"), Verdict.problem,
         "no `axolotl` on the PATH of host box: install Axolotl there, or set targets.box.venv"),
        (TrainerProbe("/v/bin/axolotl", "not_executable", "/v/bin/axolotl"), Verdict.problem,
         "/v/bin/axolotl on host box is not an executable file"),
        (TrainerProbe("/v/bin/axolotl", "no_interpreter", "/v/bin/axolotl", "/gone/python"),
         Verdict.problem,
         "/v/bin/axolotl on host box starts with `#!/gone/python`, but /gone/python is not "
         "there"),
        (TrainerProbe("/v/bin/axolotl", "no_interpreter", "/v/bin/axolotl", "/usr/bin/env",
                      "python9"),
         Verdict.problem, "starts with `#!/usr/bin/env python9`, but python9 is not there"),
        (TrainerProbe("/v/bin/axolotl", "interpreter_failed", "/v/bin/axolotl", "/v/bin/python",
                      detail="libpython3.12.so.1.0: cannot open shared object file"),
         Verdict.problem,
         "the interpreter of /v/bin/axolotl on host box, /v/bin/python, fails to start "
         "(libpython3.12.so.1.0: cannot open shared object file); repair or recreate the venv"),
        (TrainerProbe("/v/bin/axolotl", "unreadable", detail="it did not answer within 30 s"),
         Verdict.problem,
         "could not check the trainer /v/bin/axolotl on host box: it did not answer within 30 s"),
    ],
)  # fmt: skip
def test_trainer_verdicts(probe: TrainerProbe, verdict: Verdict, words: str) -> None:
    check = trainer_check(probe, where="host box", venv_key="targets.box.venv")
    assert check.name == "trainer" and check.verdict is verdict
    assert words in (check.problems[0] if check.problems else check.summary)


@pytest.mark.parametrize(
    ("probe", "verdict", "words"),
    [
        (EngineProbe("docker", "ok", version="27.1"), Verdict.ok,
         "docker on this machine answers (version 27.1)"),
        (EngineProbe("podman", "missing"), Verdict.problem,
         "`podman` is not installed on this machine (not on its PATH): install it, or set "
         "targets.here.engine"),
        (EngineProbe("docker", "no_answer", detail="Cannot connect to the Docker daemon"),
         Verdict.problem,
         "docker on this machine does not answer (Cannot connect to the Docker daemon); start "
         "it, then check again"),
        (EngineProbe("docker", "unreadable", detail="lost the connection"), Verdict.problem,
         "could not check docker on this machine: lost the connection"),
    ],
)  # fmt: skip
def test_engine_verdicts(probe: EngineProbe, verdict: Verdict, words: str) -> None:
    check = engine_check(probe, where="this machine", engine_key="targets.here.engine")
    assert check.verdict is verdict
    assert words in (check.problems[0] if check.problems else check.summary)


def test_image_verdicts() -> None:
    pinned = image_check("pod image", "targets.gpu.image", PINNED, allowed_unpinned=False,
                         default=False)  # fmt: skip
    assert (pinned.name, pinned.verdict, pinned.summary) == (
        "pod image",
        Verdict.ok,
        "ghcr.io/x/axolotl:1@sha256:aaaaaaaaaaaa… (pinned by digest)",
    )
    default = image_check("pod image", "targets.gpu.image", RUNPOD_DEFAULT_IMAGE,
                          allowed_unpinned=False, default=True)  # fmt: skip
    assert default.verdict is Verdict.ok and "(the default image, pinned by digest)" in (
        default.summary
    )
    assert default.summary.startswith(
        "axolotlai/axolotl-cloud-term:0.19.0-py3.12-cu130-2.12.1@sha256:f7b94da82913… ("
    )
    moving = image_check("container image", "targets.box.image", "axolotl:latest",
                         allowed_unpinned=True, default=False)  # fmt: skip
    assert moving.verdict is Verdict.warning and moving.problems == ()
    assert moving.warnings[0].startswith("targets.box.image is not pinned by digest")
    refused = image_check("container image", "targets.box.image", "axolotl:latest",
                          allowed_unpinned=False, default=False)  # fmt: skip
    assert refused.verdict is Verdict.problem
    assert refused.problems[0].startswith("targets.box.image must be pinned by digest")


@pytest.mark.parametrize(
    ("answer", "verdict", "words"),
    [
        (3, Verdict.ok, "accepted by https://api.runpod.io/v2 (3 pods on the account)"),
        (1, Verdict.ok, "(1 pod on the account)"),
        (ApiFailure(401, "cannot list pods: HTTP 401"), Verdict.problem,
         "OVERBRAINER_RUNPOD__API_KEY: Runpod refused the key (HTTP 401)"),
        (ApiFailure(403, "cannot list pods: HTTP 403"), Verdict.problem,
         "may not list the account's pods (HTTP 403)"),
        (ApiFailure(None, "ConnectError talking to api.runpod.io"), Verdict.problem,
         "cannot reach Runpod at https://api.runpod.io/v2 (ConnectError talking to "
         "api.runpod.io); check the connection and OVERBRAINER_RUNPOD__BASE_URL"),
        ("OVERBRAINER_RUNPOD__API_KEY: not set; create a key", Verdict.problem,
         "OVERBRAINER_RUNPOD__API_KEY: not set"),
    ],
)  # fmt: skip
def test_runpod_key_verdicts(answer: int | ApiFailure | str, verdict: Verdict, words: str) -> None:
    check = runpod_key_check("https://api.runpod.io/v2", answer)
    assert check.verdict is verdict
    assert words in (check.problems[0] if check.problems else check.summary)


def test_gpu_types_that_exist_pass_with_their_memory_and_price() -> None:
    check = gpu_types_check("gpu", ["NVIDIA A40", "NVIDIA GeForce RTX 4090"], 1, CATALOG)
    assert check.verdict is Verdict.ok
    assert check.summary == (
        "in Runpod's catalog: NVIDIA A40 (48 GB, $0.40/h per GPU); "
        "NVIDIA GeForce RTX 4090 (48 GB, $0.40/h per GPU)"
    )


@pytest.mark.parametrize(
    ("wanted", "count", "problem"),
    [
        ("RTX 4090", 1,
         'targets.gpu.gpu_types[1]: "RTX 4090" is not a GPU type in Runpod\'s catalog; did you '
         'mean "NVIDIA GeForce RTX 4090" (its catalog name is "RTX 4090")?'),
        ("nvidia a40", 1, 'did you mean "NVIDIA A40"'),
        ("NVIDIA RTX A6001", 1, 'close ones: "NVIDIA RTX A6000"'),
        ("Quantum GPU 9000", 1,
         "\"Quantum GPU 9000\" is not a GPU type in Runpod's catalog; use a GPU type id exactly "
         "as Runpod's catalog spells it"),
        ("NVIDIA L40S", 1,
         '"NVIDIA L40S" is not offered on Runpod\'s secure cloud, where overbrainer creates '
         "pods"),
        ("NVIDIA H100 80GB HBM3", 4,
         'a pod of "NVIDIA H100 80GB HBM3" has at most 2 GPUs, and targets.gpu.gpu_count is 4'),
    ],
)  # fmt: skip
def test_gpu_types_that_cannot_be_used_are_named_with_their_key(
    wanted: str, count: int, problem: str
) -> None:
    check = gpu_types_check("gpu", ["NVIDIA A40", wanted], count, CATALOG)
    assert check.verdict is Verdict.problem
    assert check.summary == "1 of 2 cannot be used"
    (found,) = check.problems
    assert found.startswith("targets.gpu.gpu_types[1]: ") and problem in found


def test_every_unusable_gpu_type_is_listed() -> None:
    check = gpu_types_check("gpu", ["A", "NVIDIA A40", "B"], 1, CATALOG)
    assert [p.split(":")[0] for p in check.problems] == [
        "targets.gpu.gpu_types[0]",
        "targets.gpu.gpu_types[2]",
    ]


def test_an_unreadable_catalog_is_a_warning_not_a_problem() -> None:
    check = gpu_types_check("gpu", ["NVIDIA A40"], 1, ApiFailure(503, "HTTP 503 after 5 attempts"))
    assert check.verdict is Verdict.warning and check.problems == ()
    assert check.warnings == (
        "could not read Runpod's GPU catalog to check targets.gpu.gpu_types (HTTP 503 after 5 "
        "attempts)",
    )


def test_host_verdicts() -> None:
    assert host_check("box", None).summary == "box: answered with its known host key"
    refused = host_check("box", "the host key of box is not the one in your known hosts")
    assert refused.verdict is Verdict.problem and refused.problems[0].startswith("the host key")


def test_the_report_lists_every_check_and_fails_on_any_problem() -> None:
    checks = (
        Check("configuration", Verdict.ok, "overbrainer.toml: target gpu (runpod)"),
        Check("data", Verdict.problem, "data files: 2 problems", ("a:1: x", "a:2: y")),
        Check("pod image", Verdict.warning, "img (not pinned)", warnings=("not pinned",)),
        skipped("gpu types", "not checked: no API key"),
    )
    report = Report("target gpu (runpod)", checks)
    assert not report.ok and report.problems == ["a:1: x", "a:2: y"]
    assert report.warnings == ["not pinned"]
    assert report.lines() == [
        "preflight of target gpu (runpod):",
        "  ok       configuration  overbrainer.toml: target gpu (runpod)",
        "  PROBLEM  data           data files: 2 problems",
        "             a:1: x",
        "             a:2: y",
        "  warning  pod image      img (not pinned)",
        "             warning: not pinned",
        "  skipped  gpu types      not checked: no API key",
    ]
    assert report.failure("overbrainer train").splitlines() == [
        "preflight found 2 problems; no run was created:",
        "  a:1: x",
        "  a:2: y",
        "fix them, then run `overbrainer train` again (`overbrainer train --check` checks "
        "without training)",
    ]
    assert report.summary().startswith("train --check: 2 problems (listed above); fix them")
    fine = Report("target local (local, native)", checks[:1] + checks[2:3])
    assert fine.ok and fine.summary() == (
        "train --check: every check passed on target local (local, native)"
    )


HOLDS = "each run keeps its files in runs/<id>"


@pytest.mark.parametrize(
    ("fact", "verdict", "said"),
    [
        (DirFact("runs/", "/p/runs", "writable", HOLDS), Verdict.ok, "runs/: writable"),
        (
            DirFact("runs/", "/p/runs", "creatable", HOLDS),
            Verdict.ok,
            "runs/ (to be created): writable",
        ),
        (
            DirFact("runs/", "/p q/runs", "not_writable", HOLDS, why="read-only file system"),
            Verdict.problem,
            "/p q/runs cannot be written (read-only file system): each run keeps its files in "
            "runs/<id>; make it writable: chmod -R u+w '/p q/runs'",
        ),
        (
            DirFact(
                "runs/", "/p/runs", "cannot_create", HOLDS, parent="/p", why="permission denied"
            ),
            Verdict.problem,
            "runs/ cannot be created in /p (permission denied): each run keeps its files in "
            "runs/<id>; make that directory writable (chmod u+w /p) or create runs/ there "
            "yourself",
        ),
        (
            DirFact("runs/", "/p/runs", "not_a_directory", HOLDS),
            Verdict.problem,
            "/p/runs is not a directory: each run keeps its files in runs/<id>; move it out of "
            "the way",
        ),
    ],
)
def test_the_directories_a_run_writes_into(fact: DirFact, verdict: Verdict, said: str) -> None:
    check = project_dirs_check([fact])
    assert (check.name, check.verdict) == ("run files", verdict)
    assert (check.problems[0] if check.problems else check.summary) == said


@pytest.mark.parametrize(
    ("count", "processes", "verdict", "said"),
    [
        (None, None, None, None),
        (None, 1, None, None),
        (None, 2, "warning", "targets.box.processes is 2 and no GPU could be counted"),
        (4, None, "ok", "4 GPUs on host h (nvidia-smi): the job runs 4 processes"),
        (0, None, "ok", "0 GPUs on host h (nvidia-smi): the job runs 1 process"),
        (2, 2, "ok", "2 GPUs on host h (nvidia-smi): 2 processes use them"),
        (1, 4, "problem", "targets.box.processes is 4 but host h shows 1 GPU: lower it to 1"),
    ],
)
def test_the_gpus_a_machine_shows_against_its_processes(
    count: int | None, processes: int | None, verdict: str | None, said: str | None
) -> None:
    from overbrainer.preflight.checks import gpus_check
    from overbrainer.preflight.probes import GpusProbe

    probe = GpusProbe(count, "" if count is not None else "no nvidia-smi")
    found = gpus_check(probe, processes, where="host h", key="targets.box.processes")
    if verdict is None:
        assert found is None
        return
    assert found is not None and found.verdict.name == verdict
    assert said is not None and said in " ".join((found.summary, *found.problems, *found.warnings))
