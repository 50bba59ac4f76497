"""``load_settings``: layering, the environment's types, and one error listing every problem."""

from pathlib import Path

import pytest

from overbrainer.config.load import (
    NON_CONFIG_ENV,
    ConfigError,
    load_resolved,
    load_settings,
)
from overbrainer.config.model import LocalTarget, RunpodTarget, SshTarget

DIGEST = "sha256:" + "cd" * 32
CANARY = "CANARY-e5d2-never-print"

CONFIG = f"""\
[training]
target = "gpu"
base_model = "Qwen/Qwen3-0.6B"
adapter = "qlora"
epochs = 2

[targets.local]
kind = "local"

[targets.box]
kind = "ssh"

[targets.gpu]
kind = "runpod"
gpu_types = ["NVIDIA L40"]
max_hours = 2.5
image = "axolotl/cloud@{DIGEST}"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "overbrainer.toml").write_text(CONFIG, encoding="utf-8")
    return tmp_path


def test_file_over_defaults(project: Path) -> None:
    settings = load_settings(project, {})
    assert settings.training.epochs == 2
    assert settings.training.lora_r == 16
    assert settings.training.adapter == "qlora"
    gpu = settings.target_of("gpu")
    assert isinstance(gpu, RunpodTarget) and gpu.max_hours == 2.5
    assert settings.store.url is None and not settings.store.is_postgres
    assert settings.runpod.base_url == "https://api.runpod.io/v2"


@pytest.mark.parametrize(
    ("variable", "text", "attribute", "value"),
    [
        ("OVERBRAINER_TRAINING__EPOCHS", " 7 ", ("training", "epochs"), 7),
        ("OVERBRAINER_TRAINING__LEARNING_RATE", "1e-5", ("training", "learning_rate"), 1e-5),
        ("OVERBRAINER_TRAINING__SAMPLE_PACKING", "no", ("training", "sample_packing"), False),
        ("OVERBRAINER_TRAINING__SAMPLE_PACKING", "0", ("training", "sample_packing"), False),
        ("OVERBRAINER_TRAINING__MERGE", "YES", ("training", "merge"), True),
        ("OVERBRAINER_TRAINING__MERGE", "1", ("training", "merge"), True),
        ("OVERBRAINER_TRAINING__MERGE", "True", ("training", "merge"), True),
        ("OVERBRAINER_TRAINING__ADAPTER", "full", ("training", "adapter"), "full"),
        (
            "OVERBRAINER_TRAINING__HUB_MODEL_ID",
            "me/model",
            ("training", "hub_model_id"),
            "me/model",
        ),
        (
            "OVERBRAINER_STORE__URL",
            "sqlite:////tmp/e.sqlite",
            ("store", "url"),
            "sqlite:////tmp/e.sqlite",
        ),
        (
            "OVERBRAINER_RUNPOD__BASE_URL",
            "http://127.0.0.1:8123/v2",
            ("runpod", "base_url"),
            "http://127.0.0.1:8123/v2",
        ),
        ("Overbrainer_Training__Epochs", "9", ("training", "epochs"), 9),
        (
            "OVERBRAINER_TRAINING__KEEP_CHECKPOINTS",
            "5",
            ("training", "keep_checkpoints"),
            5,
        ),
    ],
)
def test_env_over_file(
    project: Path, variable: str, text: str, attribute: tuple[str, str], value: object
) -> None:
    settings = load_settings(project, {variable: text})
    assert getattr(getattr(settings, attribute[0]), attribute[1]) == value


def test_keep_checkpoints_defaults_to_two_and_refuses_none(project: Path) -> None:
    assert load_settings(project, {}).training.keep_checkpoints == 2
    with pytest.raises(ConfigError, match=r"training\.keep_checkpoints"):
        load_settings(project, {"OVERBRAINER_TRAINING__KEEP_CHECKPOINTS": "0"})


def test_stall_bounds_default_to_twenty_and_sixty_minutes(project: Path) -> None:
    training = load_settings(project, {}).training
    assert (training.stall_minutes, training.first_step_minutes) == (20, 60)


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({"OVERBRAINER_TRAINING__STALL_MINUTES": "0"}, r"training\.stall_minutes"),
        ({"OVERBRAINER_TRAINING__STALL_MINUTES": "inf"}, r"training\.stall_minutes"),
        ({"OVERBRAINER_TRAINING__FIRST_STEP_MINUTES": "-1"}, r"training\.first_step_minutes"),
        (
            {
                "OVERBRAINER_TRAINING__STALL_MINUTES": "30",
                "OVERBRAINER_TRAINING__FIRST_STEP_MINUTES": "25",
            },
            r"training\.first_step_minutes.*at least stall_minutes \(30\)",
        ),
    ],
)
def test_stall_bounds_out_of_range_are_refused_naming_the_key(
    project: Path, environ: dict[str, str], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_settings(project, environ)


def test_target_overrides_from_env(project: Path) -> None:
    resolved = load_resolved(
        project,
        {
            "OVERBRAINER_TARGETS__GPU__MAX_HOURS": "6",
            "OVERBRAINER_TARGETS__GPU__GPU_TYPES": "NVIDIA H100 80GB HBM3,NVIDIA L40",
            "OVERBRAINER_TARGETS__GPU__CONTAINER_DISK_GB": "80",
            "OVERBRAINER_TARGETS__BOX__HOST": "me@box.example.com:2200",
            "OVERBRAINER_TARGETS__BOX__WORKDIR": "ob/runs",
            "OVERBRAINER_TARGETS__LOCAL__VENV": "/opt/axolotl",
        },
    )
    settings = resolved.settings
    gpu, box, local = (settings.targets[n] for n in ("gpu", "box", "local"))
    assert isinstance(gpu, RunpodTarget)
    assert (gpu.max_hours, gpu.container_disk_gb) == (6.0, 80)
    assert gpu.gpu_types == ["NVIDIA H100 80GB HBM3", "NVIDIA L40"]
    assert isinstance(box, SshTarget) and box.workdir == "ob/runs"
    assert settings.require_host("box") == "me@box.example.com:2200"
    assert isinstance(local, LocalTarget) and local.venv == "/opt/axolotl"
    assert resolved.sources["targets.gpu.max_hours"] == "OVERBRAINER_TARGETS__GPU__MAX_HOURS"
    assert "training.epochs" not in resolved.sources


def test_a_kind_changed_from_env_decides_the_keys(project: Path) -> None:
    settings = load_settings(
        project,
        {
            "OVERBRAINER_TARGETS__LOCAL__KIND": "ssh",
            "OVERBRAINER_TARGETS__LOCAL__HOST": "box",
        },
    )
    assert isinstance(settings.targets["local"], SshTarget)
    assert settings.require_host("local") == "box"


def test_secrets_from_env(project: Path) -> None:
    settings = load_settings(
        project,
        {"OVERBRAINER_RUNPOD__API_KEY": CANARY, "overbrainer_hf_token": "hf_" + CANARY},
    )
    assert settings.require_runpod_api_key() == CANARY
    assert settings.hf_token is not None
    assert settings.hf_token.get_secret_value() == "hf_" + CANARY


def test_the_s3_api_key_comes_from_the_environment_only(project: Path) -> None:
    settings = load_settings(
        project,
        {
            "OVERBRAINER_RUNPOD__S3_ACCESS_KEY": "user_" + CANARY,
            "OVERBRAINER_RUNPOD__S3_SECRET": "rps_" + CANARY,
            "OVERBRAINER_RUNPOD__S3_BASE_URL": "http://127.0.0.1:9000",
        },
    )
    assert settings.runpod.s3_secret is not None
    assert settings.runpod.s3_secret.get_secret_value() == "rps_" + CANARY
    assert settings.runpod.s3_base_url == "http://127.0.0.1:9000"
    text = (project / "overbrainer.toml").read_text()
    (project / "overbrainer.toml").write_text(
        text + f'\n[runpod]\ns3_access_key = "user_{CANARY}"\ns3_secret = "rps_{CANARY}"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(project, {})
    assert [problem.split(":")[0] for problem in caught.value.problems] == [
        "runpod.s3_access_key",
        "runpod.s3_secret",
    ]
    assert "set OVERBRAINER_RUNPOD__S3_SECRET in the environment" in str(caught.value)
    assert CANARY not in str(caught.value)


@pytest.mark.parametrize("half", ["S3_ACCESS_KEY", "S3_SECRET"])
def test_half_an_s3_api_key_is_one_problem_naming_both_variables(project: Path, half: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(project, {f"OVERBRAINER_RUNPOD__{half}": "x_" + CANARY})
    [problem] = caught.value.problems
    missing = "s3_secret" if half == "S3_ACCESS_KEY" else "s3_access_key"
    assert problem.startswith(f"runpod.{missing}: is not set, and the S3 API key needs both")
    assert "OVERBRAINER_RUNPOD__S3_ACCESS_KEY" in problem and "__S3_SECRET" in problem
    assert CANARY not in str(caught.value)


def test_non_config_variables_and_empty_values_are_ignored(project: Path) -> None:
    environ = {name: "x" for name in NON_CONFIG_ENV}
    environ.update({"OVERBRAINER_TRAINING__EPOCHS": "", "OVERBRAINER_HF_TOKEN": "", "PATH": "/bin"})
    settings = load_settings(project, environ)
    assert settings.training.epochs == 2 and settings.hf_token is None


def test_unknown_variable_is_refused_even_when_empty(project: Path) -> None:
    with pytest.raises(ConfigError, match="OVERBRAINER_TRAINING__EPOHCS"):
        load_settings(project, {"OVERBRAINER_TRAINING__EPOHCS": ""})


@pytest.mark.parametrize(
    "variable",
    [
        "OVERBRAINER_",
        "OVERBRAINER_TRAINING",
        "OVERBRAINER_TRAINING__EPOCHS__X",
        "OVERBRAINER_TARGETS__GPU",
        "OVERBRAINER_TARGETS__GPU__NOPE",
        "OVERBRAINER_TARGETS__LOCAL__GPU_TYPES",
        "OVERBRAINER_RUNPOD__KEY",
        "OVERBRAINER_STORE",
        "OVERBRAINER_HF_TOKEN__X",
    ],
)
def test_variables_that_name_no_setting(project: Path, variable: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(project, {variable: "1"})
    assert caught.value.problems[0].startswith(f"{variable}: ")


def test_one_error_lists_every_problem_and_no_secret(project: Path) -> None:
    text = CONFIG.replace("epochs = 2", f'epochs = 0\nlora_r = -3\nhf_token = "{CANARY}"')
    (project / "overbrainer.toml").write_text(text + f'\n[runpod]\napi_key = "{CANARY}"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(
            project,
            {
                "OVERBRAINER_TARGETS__GPU__MAX_HOURS": "0",
                "OVERBRAINER_TARGETS__BOX__HOST": "-oProxyCommand=" + CANARY,
                "OVERBRAINER_BOGUS": CANARY,
            },
        )
    error = caught.value
    message = str(error)
    assert CANARY not in message
    keys = [problem.split(":")[0] for problem in error.problems]
    assert keys == [
        "runpod.api_key",
        "OVERBRAINER_BOGUS",
        "training.epochs",
        "training.lora_r",
        "training.hf_token",
        "targets.box.host (from OVERBRAINER_TARGETS__BOX__HOST)",
        "targets.gpu.max_hours (from OVERBRAINER_TARGETS__GPU__MAX_HOURS)",
    ]
    assert message.startswith("the configuration has 7 problems:\n  runpod.api_key: ")
    assert "training.hf_token: is not a setting, and a secret is never read" in message
    assert message.endswith(
        "\ncheck them all with: overbrainer -C " + str(project) + " config check"
    )


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(tmp_path, {"OVERBRAINER_TRAINING__EPOCHS": "3"})
    looked = ", ".join(map(str, [tmp_path, *tmp_path.resolve().parents]))
    assert caught.value.problems == [
        f"{tmp_path} is not an overbrainer project yet, nor is any directory above it (looked "
        f"for overbrainer.toml or .overbrainer/events.sqlite in {looked}); create one with: "
        f"overbrainer init {tmp_path}"
    ]
    # A project that lost its file (its log is there) is told what is missing.
    (tmp_path / ".overbrainer").mkdir()
    with pytest.raises(ConfigError) as caught:
        load_settings(tmp_path, {})
    assert caught.value.problems == [
        f"{tmp_path / 'overbrainer.toml'} does not exist, so {tmp_path} is not an overbrainer "
        f"project yet; create one with: overbrainer init {tmp_path}"
    ]


def test_bad_toml_names_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "overbrainer.toml").write_text('[training]\ntarget = "a"\nbase_model = \n')
    with pytest.raises(ConfigError, match=r"is not valid TOML: .*\(at line 3, column 14\)"):
        load_settings(tmp_path, {})


def test_not_utf8_toml(tmp_path: Path) -> None:
    (tmp_path / "overbrainer.toml").write_bytes(b"[training]\nbase_model = '\xff'\n")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_settings(tmp_path, {})


def test_sections_of_the_wrong_type(tmp_path: Path) -> None:
    (tmp_path / "overbrainer.toml").write_text('training = 3\ntargets = "x"\nstore = []\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(tmp_path, {"OVERBRAINER_STORE__URL": "sqlite:////tmp/x"})
    assert caught.value.problems == [
        "training: must be a table",
        "targets: must be a table",
        "store: must be a table",
    ]


def test_store_password_from_env_is_allowed(project: Path) -> None:
    settings = load_settings(project, {"OVERBRAINER_STORE__URL": f"postgresql://me:{CANARY}@db/ob"})
    assert settings.store.is_postgres
    assert CANARY not in repr(settings)


def test_the_save_before_the_deadline_is_set_in_the_file_or_the_environment(
    project: Path,
) -> None:
    def gpu(env: dict[str, str]) -> RunpodTarget:
        target = load_settings(project, env).targets["gpu"]
        assert isinstance(target, RunpodTarget)
        return target

    # Unset: 10 minutes, or a quarter of a shorter bound.
    assert gpu({}).save_before == 10
    assert gpu({"OVERBRAINER_TARGETS__GPU__MAX_HOURS": "0.5"}).save_before == 7.5
    variable = "OVERBRAINER_TARGETS__GPU__SAVE_BEFORE_DEADLINE_MINUTES"
    assert gpu({variable: "25"}).save_before == 25
    assert gpu({variable: "0"}).save_before == 0  # only at the cost cap
    text = (project / "overbrainer.toml").read_text()
    (project / "overbrainer.toml").write_text(
        text + "save_before_deadline_minutes = 149.5\n", encoding="utf-8"
    )
    assert gpu({}).save_before == 149.5


@pytest.mark.parametrize("value", ["150", "900"])
def test_a_save_that_leaves_no_time_to_train_is_refused(project: Path, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(project, {"OVERBRAINER_TARGETS__GPU__SAVE_BEFORE_DEADLINE_MINUTES": value})
    message = str(refused.value)
    assert "targets.gpu.save_before_deadline_minutes" in message
    assert f"({value}) leaves no time to train" in message
    assert "max_hours = 2.5 (150 minutes)" in message
    assert "set save_before_deadline_minutes below 150 (default 10) or raise max_hours" in message


def test_a_negative_save_time_is_refused(project: Path) -> None:
    with pytest.raises(ConfigError, match="save_before_deadline_minutes"):
        load_settings(project, {"OVERBRAINER_TARGETS__GPU__SAVE_BEFORE_DEADLINE_MINUTES": "-1"})


def test_the_monthly_budget_is_optional_and_set_in_the_file_or_the_environment(
    project: Path,
) -> None:
    assert load_settings(project, {}).project.monthly_budget_usd is None
    with (project / "overbrainer.toml").open("a", encoding="utf-8") as toml:
        toml.write("\n[project]\nmonthly_budget_usd = 100\n")
    assert load_settings(project, {}).project.monthly_budget_usd == 100.0
    env = {"OVERBRAINER_PROJECT__MONTHLY_BUDGET_USD": "12.5"}
    assert load_settings(project, env).project.monthly_budget_usd == 12.5


@pytest.mark.parametrize("value", ["0", "-5", "1e9"])
def test_a_monthly_budget_that_is_not_a_positive_amount_is_refused(
    project: Path, value: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(project, {"OVERBRAINER_PROJECT__MONTHLY_BUDGET_USD": value})
    assert refused.value.problems == [
        "project.monthly_budget_usd (from OVERBRAINER_PROJECT__MONTHLY_BUDGET_USD): must be a "
        "number of US dollars greater than 0 (e.g. 100); remove it for no monthly budget"
    ]


@pytest.mark.parametrize(
    ("written", "seconds"),
    [(None, 0.0), ('"0"', 0.0), ('"30m"', 1800.0), ('"2h"', 7200.0), ('"90s"', 90.0)],
)
def test_wait_for_capacity_is_read_as_a_span(
    project: Path, written: str | None, seconds: float
) -> None:
    if written is not None:
        text = (project / "overbrainer.toml").read_text()
        (project / "overbrainer.toml").write_text(
            text + f"wait_for_capacity = {written}\n", encoding="utf-8"
        )
    gpu = load_settings(project, {}).target_of("gpu")
    assert isinstance(gpu, RunpodTarget)
    assert gpu.capacity_wait_seconds == seconds


def test_wait_for_capacity_comes_from_the_environment_too(project: Path) -> None:
    variable = "OVERBRAINER_TARGETS__GPU__WAIT_FOR_CAPACITY"
    gpu = load_settings(project, {variable: "1h30m"}).target_of("gpu")
    assert isinstance(gpu, RunpodTarget)
    assert gpu.wait_for_capacity == "1h30m" and gpu.capacity_wait_seconds == 5400


@pytest.mark.parametrize("written", ['"30 min"', '"1.5h"', '"-5m"', '"30"', "30", '"200h"'])
def test_a_wait_for_capacity_not_a_span_is_refused_naming_key_value_and_form(
    project: Path, written: str
) -> None:
    text = (project / "overbrainer.toml").read_text()
    (project / "overbrainer.toml").write_text(
        text + f"wait_for_capacity = {written}\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError) as refused:
        load_settings(project, {})
    message = str(refused.value)
    assert "targets.gpu.wait_for_capacity" in message
    assert written.strip('"') in message
    assert '"30m"' in message


def _gpu_with(project: Path, lines: str) -> RunpodTarget:
    with (project / "overbrainer.toml").open("a", encoding="utf-8") as toml:
        toml.write(lines)
    target = load_settings(project, {}).targets["gpu"]
    assert isinstance(target, RunpodTarget)
    return target


def _refusal(project: Path, lines: str) -> str:
    with pytest.raises(ConfigError) as refused:
        _gpu_with(project, lines)
    return str(refused.value)


def test_a_project_volume_lives_in_its_data_center_and_pods_are_created_only_there(
    project: Path,
) -> None:
    gpu = _gpu_with(project, 'volume = "cache"\nvolume_data_center = "US-KS-2"\n')
    assert (gpu.volume, gpu.volume_size_gb, gpu.volume_center) == ("cache", 50, "US-KS-2")
    assert gpu.pod_data_centers == ["US-KS-2"]


def test_a_volume_takes_its_data_center_from_a_single_data_center_id(project: Path) -> None:
    gpu = _gpu_with(project, 'volume = "cache"\ndata_center_ids = ["EU-RO-1"]\n')
    assert gpu.volume_center == "EU-RO-1" and gpu.pod_data_centers == ["EU-RO-1"]
    assert _gpu_with(project, "volume_size_gb = 200\n").volume_size_gb == 200


def test_without_a_volume_the_pod_may_be_created_in_any_allowed_data_center(
    project: Path,
) -> None:
    gpu = _gpu_with(project, 'data_center_ids = ["EU-RO-1", "US-KS-2"]\n')
    assert gpu.volume_center is None and gpu.pod_data_centers == ["EU-RO-1", "US-KS-2"]


def test_a_volume_with_data_center_ids_uses_the_one_named_among_them(project: Path) -> None:
    gpu = _gpu_with(
        project,
        'volume = "cache"\ndata_center_ids = ["EU-RO-1", "US-KS-2"]\n'
        'volume_data_center = "US-KS-2"\n',
    )
    assert gpu.pod_data_centers == ["US-KS-2"]


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (
            'volume = "cache"\n',
            [
                "targets.gpu.volume_data_center",
                'is required with volume = "cache"',
                'set volume_data_center = "EU-RO-1"',
                "data_center_ids to exactly one",
            ],
        ),
        (
            'volume = "cache"\ndata_center_ids = ["EU-RO-1", "US-KS-2"]\n',
            ["targets.gpu.volume_data_center", "is required"],
        ),
        (
            'volume = "cache"\ndata_center_ids = ["EU-RO-1"]\nvolume_data_center = "US-KS-2"\n',
            [
                "targets.gpu.volume_data_center",
                '("US-KS-2") is not one of data_center_ids (EU-RO-1)',
                "add it to data_center_ids or change volume_data_center",
            ],
        ),
        (
            'volume = "cache"\ndata_center_ids = ["EU-RO-1"]\nnetwork_volume_id = "v1"\n',
            ["targets.gpu.volume", "network_volume_id", "not both"],
        ),
        ('volume = "my cache"\nvolume_data_center = "EU-RO-1"\n', ["targets.gpu.volume", "name"]),
        ('volume = "-x"\nvolume_data_center = "EU-RO-1"\n', ["targets.gpu.volume"]),
        (
            'volume = "cache"\nvolume_data_center = "EU-RO-1"\nvolume_size_gb = 5\n',
            ["targets.gpu.volume_size_gb"],
        ),
        (
            'volume = "cache"\nvolume_data_center = "EU-RO-1"\nvolume_size_gb = 5000\n',
            ["targets.gpu.volume_size_gb"],
        ),
        (
            'volume_data_center = "EU-RO-1"\n',
            ["targets.gpu.volume_data_center", 'applies only with a volume: set volume = "NAME"'],
        ),
        ("volume_size_gb = 100\n", ["targets.gpu.volume_size_gb", "applies only with a volume"]),
        ('volume = "cache"\nvolume_data_center = "EU RO"\n', ["targets.gpu.volume_data_center"]),
        (
            'checkpoints_home = "last"\n',
            [
                "targets.gpu.checkpoints_home",
                'set volume = "NAME" or checkpoints_home = "all"',
                "needs a network volume",
            ],
        ),
        ('checkpoints_home = "none"\n', ["targets.gpu.checkpoints_home", "needs a network volume"]),
        (
            'volume = "cache"\nvolume_data_center = "EU-RO-1"\ncheckpoints_home = "some"\n',
            ["targets.gpu.checkpoints_home"],
        ),
    ],
)
def test_a_volume_setting_that_cannot_be_used_is_refused_naming_its_key(
    project: Path, lines: str, words: list[str]
) -> None:
    message = _refusal(project, lines)
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    ("lines", "brought"),
    [
        ("", "all"),
        ('checkpoints_home = "all"\n', "all"),
        ('volume = "cache"\nvolume_data_center = "EU-RO-1"\n', "last"),
        ('volume = "cache"\nvolume_data_center = "EU-RO-1"\ncheckpoints_home = "all"\n', "all"),
        ('volume = "cache"\nvolume_data_center = "EU-RO-1"\ncheckpoints_home = "none"\n', "none"),
    ],
)
def test_checkpoints_home_defaults_to_all_without_a_volume_and_last_with_one(
    project: Path, lines: str, brought: str
) -> None:
    assert _gpu_with(project, lines).checkpoints_brought_home == brought
