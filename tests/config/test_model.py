"""The settings models and the safe-value rule."""

import shlex
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from overbrainer.config.load import ConfigError, masked
from overbrainer.config.model import (
    RUNPOD_DEFAULT_IMAGE,
    RunpodTarget,
    Settings,
    SshTarget,
    is_loopback_host,
    is_pinned_image,
    is_safe_label,
    is_safe_value,
    parse_host,
    secret_problem,
    store_url_has_password,
    strip_url_password,
)

DIGEST = "sha256:" + "ab" * 32
CANARY = "CANARY-93e1-never-print"


@pytest.mark.parametrize(
    "value",
    [
        "/workspace/axolotl-venv",
        "overbrainer",
        "runs/2024",
        "axolotlai/axolotl-cloud:main-latest@" + DIGEST,
        "ghcr.io/org/img:1.2.3",
        "EU-RO-1",
        "a_b.c+d=e",
        "x",
        "dir/.hidden",
    ],
)
def test_safe_values(value: str) -> None:
    assert is_safe_value(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "my venv",
        "it's",
        'say"hi',
        "../etc",
        "/opt/../etc",
        "a..b",
        "-rf",
        "--option",
        "a\nb",
        "a\rb",
        "a\0b",
        "a\tb",
        "$(id)",
        "`id`",
        "a;b",
        "a&b",
        "a|b",
        "a>b",
        "a<b",
        "*",
        "a?",
        "~/venv",
        "a!b",
        "#x",
        "a\\b",
        "{a,b}",
        "(a)",
        "é",
        "x" * 1025,
    ],
)
def test_unsafe_values(value: str) -> None:
    assert not is_safe_value(value)


@given(st.text())
def test_a_safe_value_needs_no_shell_quoting(value: str) -> None:
    if is_safe_value(value):
        assert shlex.quote(value) == value
        assert not value.startswith("-") and ".." not in value
        assert value.isascii() and value.isprintable()


@pytest.mark.parametrize(
    ("value", "safe"),
    [
        ("NVIDIA GeForce RTX 4090", True),
        ("NVIDIA A100-SXM4-80GB", True),
        ("AMD Instinct MI300X OAM", True),
        ("NVIDIA  A40", False),
        (" NVIDIA", False),
        ("NVIDIA ", False),
        ("NVIDIA;A40", False),
        ("-NVIDIA", False),
        ("NVIDIA\nA40", False),
        ("", False),
    ],
)
def test_gpu_labels(value: str, safe: bool) -> None:
    assert is_safe_label(value) is safe


@pytest.mark.parametrize(
    ("image", "pinned"),
    [
        ("axolotlai/axolotl@" + DIGEST, True),
        ("axolotlai/axolotl-cloud:main-latest@" + DIGEST, True),
        ("registry.example.com:5000/a/b@" + DIGEST, True),
        ("axolotlai/axolotl:latest", False),
        ("axolotlai/axolotl@sha256:abc", False),
        ("axolotlai/axolotl@sha256:" + "AB" * 32, False),
        ("@" + DIGEST, False),
    ],
)
def test_pinned_images(image: str, pinned: bool) -> None:
    assert is_pinned_image(image) is pinned


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("::1", True),
        ("[::1]", True),
        ("128.0.0.1", False),
        ("example.com", False),
        ("localhost.example.com", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(
    ("value", "parts"),
    [
        ("gpu-box", (None, "gpu-box", None)),
        ("me@gpu.example.com", ("me", "gpu.example.com", None)),
        ("me@10.0.0.5:2222", ("me", "10.0.0.5", 2222)),
        ("[::1]:22", (None, "::1", 22)),
    ],
)
def test_parse_host(value: str, parts: tuple[Any, ...]) -> None:
    assert parse_host(value) == parts


@pytest.mark.parametrize(
    "value", ["-oProxyCommand=x", "me@", "me@host:0", "me@host:70000", "a b", "me@host;id", ""]
)
def test_parse_host_refuses(value: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_host(value)
    assert value not in str(caught.value) or value == ""


def test_store_url_password() -> None:
    url = f"postgresql://me:{CANARY}@db:5432/ob"
    assert store_url_has_password(url)
    assert strip_url_password(url) == "postgresql://me@db:5432/ob"
    assert strip_url_password(url, "****") == "postgresql://me:****@db:5432/ob"
    assert not store_url_has_password("postgresql://me@db/ob")
    assert strip_url_password("sqlite:////tmp/x.sqlite") == "sqlite:////tmp/x.sqlite"


def base(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "training": {"target": "local", "base_model": "m", "adapter": "lora"},
        "targets": {"local": {"kind": "local"}},
    }
    data.update(changes)
    return data


def test_target_kinds_are_distinct_types() -> None:
    settings = Settings.model_validate(
        base(
            targets={
                "local": {"kind": "local"},
                "box": {"kind": "ssh", "host": "me@box"},
                "gpu": {
                    "kind": "runpod",
                    "gpu_types": ["NVIDIA L40"],
                    "max_hours": 1,
                    "image": "img@" + DIGEST,
                },
            }
        )
    )
    assert [type(t).__name__ for t in settings.targets.values()] == [
        "LocalTarget",
        "SshTarget",
        "RunpodTarget",
    ]
    gpu = settings.target_of("gpu")
    assert isinstance(gpu, RunpodTarget)
    assert gpu.max_hours == 1.0 and gpu.venv == "/workspace/axolotl-venv"
    assert settings.require_host("box") == "me@box"
    box = settings.targets["box"]
    assert isinstance(box, SshTarget) and box.workdir == "overbrainer"


def test_target_of_an_unknown_name() -> None:
    settings = Settings.model_validate(base())
    with pytest.raises(ConfigError) as caught:
        settings.target_of("gpu")
    assert "no target named 'gpu' is declared (declared: local)" in str(caught.value)


def test_require_host_and_api_key_say_how_to_set_them() -> None:
    settings = Settings.model_validate(
        base(targets={"local": {"kind": "local"}, "box": {"kind": "ssh"}})
    )
    with pytest.raises(ConfigError, match="OVERBRAINER_TARGETS__BOX__HOST=user@host"):
        settings.require_host("box")
    with pytest.raises(ConfigError, match="not ssh"):
        settings.require_host("local")
    with pytest.raises(ConfigError, match="OVERBRAINER_RUNPOD__API_KEY: not set"):
        settings.require_runpod_api_key()
    keyed = Settings.model_validate(base(runpod={"api_key": CANARY}))
    assert keyed.require_runpod_api_key() == CANARY


def test_settings_digest() -> None:
    one = Settings.model_validate(base())
    reordered = Settings.model_validate(
        {
            "targets": {"local": {"kind": "local"}},
            "training": {"adapter": "lora", "base_model": "m", "target": "local"},
        }
    )
    assert one.settings_digest() == reordered.settings_digest()
    assert len(one.settings_digest()) == 64
    changed = Settings.model_validate(
        base(training={"target": "local", "base_model": "m", "adapter": "lora", "epochs": 4})
    )
    assert changed.settings_digest() != one.settings_digest()
    # Secrets (and a store password) do not enter the digest.
    secret = Settings.model_validate(base(hf_token=CANARY, runpod={"api_key": CANARY}))
    assert secret.settings_digest() == one.settings_digest()
    with_pw = Settings.model_validate(base(store={"url": f"postgresql://me:{CANARY}@db/ob"}))
    without_pw = Settings.model_validate(base(store={"url": "postgresql://me@db/ob"}))
    assert with_pw.settings_digest() == without_pw.settings_digest()
    assert CANARY not in str(with_pw.public_data())


def test_masked_shows_set_secrets_as_stars() -> None:
    settings = Settings.model_validate(
        base(
            hf_token=CANARY,
            runpod={"api_key": CANARY},
            store={"url": f"postgresql://me:{CANARY}@db/ob"},
        )
    )
    data = masked(settings)
    assert CANARY not in repr(data)
    assert data["hf_token"] == "****"
    assert data["runpod"]["api_key"] == "****"
    assert data["store"]["url"] == "postgresql://me:****@db/ob"
    assert masked(Settings.model_validate(base()))["runpod"]["api_key"] is None
    assert CANARY not in repr(settings) and CANARY not in str(settings)


def test_the_s3_api_key_is_masked_and_kept_out_of_the_digest() -> None:
    keyed = Settings.model_validate(
        base(runpod={"s3_access_key": "user_" + CANARY, "s3_secret": "rps_" + CANARY})
    )
    data = masked(keyed)
    assert (data["runpod"]["s3_access_key"], data["runpod"]["s3_secret"]) == ("****", "****")
    assert CANARY not in repr(data) and CANARY not in repr(keyed)
    assert CANARY not in str(keyed.public_data())
    assert keyed.settings_digest() == Settings.model_validate(base()).settings_digest()
    unset = masked(Settings.model_validate(base()))["runpod"]
    assert unset["s3_access_key"] is None and unset["s3_secret"] is None


@pytest.mark.parametrize("half", ["s3_access_key", "s3_secret"])
def test_half_an_s3_api_key_is_refused(half: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate(base(runpod={half: "x_" + CANARY}))
    [problem] = caught.value.errors(include_input=False)
    other = "s3_secret" if half == "s3_access_key" else "s3_access_key"
    assert problem["ctx"] is not None and problem["ctx"]["suffix"] == f".{other}"


def test_s3_base_url_follows_the_base_url_rules() -> None:
    good = Settings.model_validate(base(runpod={"s3_base_url": "http://127.0.0.1:9000/"}))
    assert good.runpod.s3_base_url == "http://127.0.0.1:9000"
    assert Settings.model_validate(base()).runpod.s3_base_url is None
    with pytest.raises(ValidationError):
        Settings.model_validate(base(runpod={"s3_base_url": "http://s3.example.com"}))


@pytest.mark.parametrize(
    "base_url",
    [
        "https://api.runpod.io/v2",
        "http://127.0.0.1:8080/v2",
        "http://localhost:9/v2",
        "http://[::1]:9/v2",
    ],
)
def test_good_base_urls(base_url: str) -> None:
    settings = Settings.model_validate(base(runpod={"base_url": base_url + "/"}))
    assert settings.runpod.base_url == base_url


@pytest.mark.parametrize(
    "base_url",
    [
        "http://api.runpod.io/v2",
        "http://10.0.0.1/v2",
        "ftp://127.0.0.1/",
        "https://",
        "https://me:pw@api.runpod.io/v2",
        "https://api.runpod.io/v2?x=1",
        "https://api.runpod.io:99999/v2",
        "api.runpod.io/v2",
    ],
)
def test_bad_base_urls(base_url: str) -> None:
    with pytest.raises(ValidationError):
        Settings.model_validate(base(runpod={"base_url": base_url}))


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:////tmp/ev.sqlite",
        "sqlite:///rel.sqlite",
        "postgresql://db/ob",
        "postgres://me@db:5433/ob",
    ],
)
def test_good_store_urls(url: str) -> None:
    assert Settings.model_validate(base(store={"url": url})).store.url == url


@pytest.mark.parametrize(
    "url",
    ["sqlite:///", "mysql://db/x", "postgresql://db:notaport/x", "postgresql://", "sqlite:///a\nb"],
)
def test_bad_store_urls(url: str) -> None:
    with pytest.raises(ValidationError):
        Settings.model_validate(base(store={"url": url}))


def test_unpinned_image_allowed_when_asked() -> None:
    target = {
        "kind": "runpod",
        "gpu_types": ["NVIDIA L40"],
        "max_hours": 720,
        "image": "axolotlai/axolotl-cloud:main-latest",
        "allow_unpinned_image": True,
    }
    settings = Settings.model_validate(base(targets={"local": {"kind": "local"}, "gpu": target}))
    assert settings.target_of("gpu").image == "axolotlai/axolotl-cloud:main-latest"  # type: ignore[union-attr]


def test_axolotl_extra_refuses_values_that_are_not_plain() -> None:
    import datetime

    training = {"target": "local", "base_model": "m", "adapter": "lora"}
    with pytest.raises(ValidationError, match="plain values"):
        Settings.model_validate(
            base(training={**training, "axolotl_extra": {"when": datetime.date(2024, 1, 1)}})
        )
    with pytest.raises(ValidationError, match="plain values"):
        Settings.model_validate(base(training={**training, "axolotl_extra": {"x": float("nan")}}))


@pytest.mark.parametrize(
    "secret",
    ["", "a b", "a\tb", "a\r", "a\nX-Evil: 1", "a\x00b", "a\x7fb", "rpa_x\u2019", "\u00e9t\u00e9"],
)
def test_a_secret_no_http_header_can_carry_is_refused_without_showing_it(secret: str) -> None:
    problem = secret_problem(secret)
    assert problem is not None and "set it to the bare value" in problem
    assert not secret.strip() or secret not in problem
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate(base(hf_token=secret, runpod={"api_key": secret}))
    assert len(caught.value.errors()) == 2


@pytest.mark.parametrize("secret", ["rpa_ABC123xyz", "hf_a-b.c~d+e/f=", "!#$%&'*^`|"])
def test_a_secret_of_printable_ascii_is_accepted(secret: str) -> None:
    assert secret_problem(secret) is None
    Settings.model_validate(base(hf_token=secret, runpod={"api_key": secret}))


def test_a_runpod_target_without_image_gets_the_pinned_axolotl_cloud_image() -> None:
    settings = Settings.model_validate(
        base(
            targets={
                "local": {"kind": "local"},
                "gpu": {"kind": "runpod", "gpu_types": ["NVIDIA A40"], "max_hours": 2},
            }
        )
    )
    gpu = settings.target_of("gpu")
    assert isinstance(gpu, RunpodTarget)
    assert gpu.image == (
        "axolotlai/axolotl-cloud-term:0.19.0-py3.12-cu130-2.12.1"
        "@sha256:f7b94da82913920a003e28e091d8528f57f76da7360fca87e95faf62fa32a680"
    )
    assert gpu.image == RUNPOD_DEFAULT_IMAGE and is_pinned_image(gpu.image)
    assert is_safe_value(gpu.image)  # it goes into a create request and a shell line
    # Its venv is where that image keeps Axolotl.
    assert gpu.venv == "/workspace/axolotl-venv"


@pytest.mark.parametrize(
    ("workdir", "kept"),
    [
        ("overbrainer", "overbrainer"),
        ("ob/runs/", "ob/runs"),
        ("/scratch/me/overbrainer", "/scratch/me/overbrainer"),
        ("/scratch/me/overbrainer/", "/scratch/me/overbrainer"),
        (".", "."),
    ],
)
def test_an_ssh_workdir_is_relative_to_the_remote_home_or_absolute(workdir: str, kept: str) -> None:
    settings = Settings.model_validate(
        base(targets={"local": {"kind": "local"}, "box": {"kind": "ssh", "workdir": workdir}})
    )
    box = settings.targets["box"]
    assert isinstance(box, SshTarget) and box.workdir == kept


@pytest.mark.parametrize(
    ("workdir", "words"),
    [
        ("/", "may not be the root directory"),
        ("///", "may not be the root directory"),
        ("/scratch/../etc", "cannot be passed safely"),
        ("~/ob", "cannot be passed safely"),
        ("/scratch/my runs", "cannot be passed safely"),
    ],
)
def test_an_ssh_workdir_that_cannot_be_used_is_refused(workdir: str, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        Settings.model_validate(
            base(targets={"local": {"kind": "local"}, "box": {"kind": "ssh", "workdir": workdir}})
        )
