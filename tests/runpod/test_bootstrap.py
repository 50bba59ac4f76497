"""The pod's bootstrap script against a temporary root, and the create call's env and args."""

import base64
import inspect
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from overbrainer.config.model import TrainingSettings
from overbrainer.runpod.keys import RunKeys, write_run_keys, write_ssh_config
from overbrainer.runpod.pod_scripts import (
    BOOTSTRAP,
    RUN_MARKER,
    WATCHDOG,
    StallBound,
    UnsafePodValue,
    pod_args,
    pod_env,
    save_before_seconds,
    script_text,
    stall_bound,
)
from overbrainer.testing.sshd import ensure_privsep_dir, free_port, wait_for_port

RUN = "20260101-120000-ab12"
SHELLS = [["sh"], ["dash"], ["busybox", "sh"]]
SHELL_IDS = ["sh", "dash", "busybox"]

# Stands in for the watchdog: records what it was handed, exits with a recognizable status.
STUB_WATCHDOG = """#!/bin/sh
{
    printf 'failed=%s\\n' "${OVERBRAINER_BOOTSTRAP_FAILED:-}"
    printf 'run_dir=%s\\n' "${OVERBRAINER_RUN_DIR:-}"
    printf 'host_key_set=%s\\n' "${OVERBRAINER_HOST_KEY_B64+yes}"
} > "$STUB_REPORT"
exit 7
"""

# Stands in for sshd: `-t` checks the config, otherwise "starts" by writing its PidFile.
FAKE_SSHD = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_SSHD_LOG"
for arg; do config=$arg; done
case $1 in
-t) exit "${FAKE_SSHD_CHECK:-0}" ;;
esac
[ "${FAKE_SSHD_START:-0}" = 0 ] || exit "$FAKE_SSHD_START"
[ -n "${FAKE_SSHD_NO_PID:-}" ] && exit 0
pid_file=$(sed -n 's/^PidFile //p' "$config")
echo $$ > "$pid_file"
"""


class Pod:
    """A temporary root standing for the pod's filesystem, and the bootstrap's environment."""

    def __init__(self, tmp: Path, keys: RunKeys) -> None:
        self.tmp = tmp
        self.keys = keys
        self.root = tmp / "root"
        self.run_dir = tmp / "workspace" / "overbrainer" / RUN
        self.pod_dir = self.run_dir / ".pod"
        self.report = tmp / "stub-report"
        self.sshd_log = tmp / "sshd.log"
        self.script = tmp / "scripts" / BOOTSTRAP
        self.script.parent.mkdir(parents=True)
        self.script.write_text(script_text(BOOTSTRAP))
        watchdog = tmp / "stub-watchdog.sh"
        watchdog.write_text(STUB_WATCHDOG)
        sshd = tmp / "fake-sshd"
        sshd.write_text(FAKE_SSHD)
        sshd.chmod(0o755)
        env = pod_env(
            RUN,
            keys,
            run_dir=str(self.run_dir),
            max_hours=1.0,
            boot_grace_seconds=60,
            retrieve_grace_seconds=60,
            keep=False,
            hf_home="/workspace/hf",
        )
        self.host_key_b64 = env["OVERBRAINER_HOST_KEY_B64"]
        self.env = {
            **env,
            "PATH": f"/usr/local/cuda/bin:{os.environ['PATH']}",
            "LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/opt/it's",
            "CUDA_HOME": "/usr/local/cuda",
            "RUNPOD_API_KEY": "rpa_CANARY_never_in_job_env",
            "OVERBRAINER_ROOT": str(self.root),
            "OVERBRAINER_SSHD": str(sshd),
            "OVERBRAINER_SSHD_WAIT": "1",
            "OVERBRAINER_WATCHDOG": str(watchdog),
            "STUB_REPORT": str(self.report),
            "FAKE_SSHD_LOG": str(self.sshd_log),
        }

    def run(self, shell: list[str]) -> subprocess.CompletedProcess[str]:
        self.env["OVERBRAINER_SHELL"] = " ".join(shell)
        return subprocess.run(
            [*shell, str(self.script)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def handed_over(self) -> dict[str, str]:
        lines = self.report.read_text().splitlines()
        return dict(line.split("=", 1) for line in lines)

    def sshd_calls(self) -> list[str]:
        return self.sshd_log.read_text().splitlines() if self.sshd_log.exists() else []


@pytest.fixture
def keys(tmp_path: Path) -> RunKeys:
    return write_run_keys(tmp_path / "local" / "runs" / RUN / "ssh", RUN)


@pytest.fixture
def pod(tmp_path: Path, keys: RunKeys) -> Pod:
    return Pod(tmp_path / "pod", keys)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _assert_no_secret(pod: Pod, *texts: str) -> None:
    secret_line = pod.keys.host_private_key.splitlines()[4]
    for text in texts:
        assert secret_line not in text
        # Past the part of the encoding that every OpenSSH ed25519 key shares.
        assert pod.host_key_b64[340:380] not in text


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
def test_installs_exactly_the_runs_keys_starts_sshd_and_hands_over(pod: Pod, shell):
    ssh_etc = pod.root / "etc" / "ssh"
    ssh_etc.mkdir(parents=True)
    for name in ("ssh_host_rsa_key", "ssh_host_rsa_key.pub", "ssh_host_ecdsa_key"):
        (ssh_etc / name).write_text("the image's own key\n")
    (pod.root / "root" / ".ssh").mkdir(parents=True)
    (pod.root / "root" / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAAsomeoneelse x\n")

    done = pod.run(shell)

    assert done.returncode == 7, done.stdout + done.stderr
    assert pod.handed_over() == {
        "failed": "",
        "run_dir": str(pod.run_dir),
        "host_key_set": "",
    }
    assert not (pod.pod_dir / "bootstrap_failed").exists()
    host_key = ssh_etc / "overbrainer_host_ed25519_key"
    assert host_key.read_text() == pod.keys.host_private_key
    assert _mode(host_key) == 0o600
    assert sorted(p.name for p in ssh_etc.iterdir()) == [
        "overbrainer_host_ed25519_key",
        "overbrainer_sshd_config",
    ]
    authorized = pod.root / "root" / ".ssh" / "authorized_keys"
    assert authorized.read_text() == pod.keys.client_public_key + "\n"
    assert _mode(authorized) == 0o600
    assert _mode(authorized.parent) == 0o700
    config = (ssh_etc / "overbrainer_sshd_config").read_text().splitlines()
    for line in (
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {authorized}",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "AllowUsers root",
    ):
        assert line in config
    assert [line for line in config if line.startswith("HostKey")] == [f"HostKey {host_key}"]
    sshd_config = str(ssh_etc / "overbrainer_sshd_config")
    assert pod.sshd_calls() == [f"-t -f {sshd_config}", f"-f {sshd_config}"]
    assert "sshd started" in done.stdout
    _assert_no_secret(
        pod,
        done.stdout,
        done.stderr,
        *(p.read_text() for p in ssh_etc.parent.rglob("*sshd_config")),
    )


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
def test_writes_the_job_environment_without_any_secret(pod: Pod, shell):
    done = pod.run(shell)
    assert done.returncode == 7, done.stdout + done.stderr
    job_env = pod.pod_dir / "job.env"
    text = job_env.read_text()
    assert "CANARY" not in text
    assert "OVERBRAINER_" not in text
    _assert_no_secret(pod, text)
    sourced = subprocess.run(
        [
            *shell,
            "-c",
            '. "$1" && printf "%s\\n" "$PATH" "$LD_LIBRARY_PATH" "$CUDA_HOME" "$HF_HOME"',
            "sh",
            str(job_env),
        ],
        env={},
        capture_output=True,
        text=True,
        check=True,
    )
    assert sourced.stdout.splitlines() == [
        pod.env["PATH"],
        "/usr/local/cuda/lib64:/opt/it's",
        "/usr/local/cuda",
        "/workspace/hf",
    ]


def _expect_failure(pod: Pod, shell: list[str], reason: str) -> subprocess.CompletedProcess[str]:
    done = pod.run(shell)
    # Handed over to the watchdog, which deletes the pod at once.
    assert done.returncode == 7, done.stdout + done.stderr
    recorded = (pod.pod_dir / "bootstrap_failed").read_text()
    assert reason in recorded
    assert recorded.count("\n") == 1
    assert pod.handed_over()["failed"] == recorded.strip()
    assert pod.handed_over()["host_key_set"] == ""
    assert f"failed: {recorded.strip()}" in done.stdout
    _assert_no_secret(pod, done.stdout, done.stderr, recorded)
    return done


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
def test_a_missing_host_key_is_reported_and_nothing_starts(pod: Pod, shell):
    del pod.env["OVERBRAINER_HOST_KEY_B64"]
    _expect_failure(pod, shell, "no host key: OVERBRAINER_HOST_KEY_B64 is not set")
    assert pod.sshd_calls() == []
    assert not (pod.root / "root" / ".ssh" / "authorized_keys").exists()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
def test_an_unwritable_ssh_directory_is_reported(pod: Pod, shell):
    # A file where a directory must go: unwritable even for root.
    (pod.root / "etc").mkdir(parents=True)
    (pod.root / "etc" / "ssh").write_text("not a directory")
    _expect_failure(pod, shell, f"cannot create {pod.root}/etc/ssh")
    assert pod.sshd_calls() == []


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
def test_sshd_failing_to_start_is_reported(pod: Pod, shell):
    pod.env["FAKE_SSHD_START"] = "3"
    _expect_failure(pod, shell, "sshd did not start (exit status 3)")


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ({"FAKE_SSHD_CHECK": "1"}, "sshd refuses its configuration"),
        ({"FAKE_SSHD_NO_PID": "1"}, "sshd did not start listening within 1s"),
        ({"OVERBRAINER_AUTHORIZED_KEY": ""}, "no client key"),
        (
            {"OVERBRAINER_AUTHORIZED_KEY": "ssh-ed25519 AAAA x\nssh-rsa AAAA y"},
            "is not one ssh-ed25519 public key",
        ),
        ({"OVERBRAINER_AUTHORIZED_KEY": "ssh-rsa AAAAB3 x"}, "is not one ssh-ed25519 public key"),
        ({"OVERBRAINER_HOST_KEY_B64": "%%%not base64%%%"}, "not valid base64"),
        (
            {"OVERBRAINER_HOST_KEY_B64": base64.b64encode(b"hello\n").decode()},
            "does not hold an OpenSSH private key",
        ),
    ],
    ids=["sshd-config", "sshd-no-pid", "no-client-key", "two-keys", "rsa", "b64", "not-a-key"],
)
def test_other_failing_steps_are_reported(pod: Pod, setup, reason):
    pod.env.update(setup)
    _expect_failure(pod, ["dash"], reason)


def test_a_missing_run_dir_is_reported_where_the_watchdog_looks(pod: Pod):
    del pod.env["OVERBRAINER_RUN_DIR"]
    done = pod.run(["dash"])
    assert done.returncode == 7
    fallback = pod.root / "tmp" / "overbrainer-run"
    assert (
        "OVERBRAINER_RUN_DIR is not set, or not a plain path"
        in (fallback / ".pod" / "bootstrap_failed").read_text()
    )
    assert pod.handed_over()["run_dir"] == str(fallback)


def test_a_relative_run_dir_is_in_the_pods_home(pod: Pod):
    home = pod.tmp / "home"
    pod.env["HOME"] = str(home)
    pod.env["OVERBRAINER_RUN_DIR"] = f"overbrainer/{RUN}"
    done = pod.run(["dash"])
    assert done.returncode == 7, done.stdout
    run_dir = home / "overbrainer" / RUN
    assert pod.handed_over() == {"failed": "", "run_dir": str(run_dir), "host_key_set": ""}
    assert (run_dir / ".pod" / "job.env").exists()


def test_without_a_watchdog_the_bootstrap_exits_non_zero(pod: Pod):
    pod.env["OVERBRAINER_WATCHDOG"] = str(pod.tmp / "missing.sh")
    del pod.env["OVERBRAINER_HOST_KEY_B64"]
    done = pod.run(["dash"])
    assert done.returncode == 1
    assert "nothing guards this pod" in done.stdout


def test_a_stale_failure_and_verdict_from_an_earlier_start_are_cleared(pod: Pod):
    pod.pod_dir.mkdir(parents=True)
    (pod.pod_dir / "bootstrap_failed").write_text("old\n")
    (pod.pod_dir / "watchdog").write_text("ready\n")
    done = pod.run(["dash"])
    assert done.returncode == 7
    assert pod.handed_over()["failed"] == ""
    assert not (pod.pod_dir / "bootstrap_failed").exists()
    assert not (pod.pod_dir / "watchdog").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="sshd logs in only its own user when not root")
def test_real_sshd_started_by_the_bootstrap_lets_in_the_run_key_with_the_pinned_host_key(
    pod: Pod,
):
    port = free_port()
    pod.env["OVERBRAINER_SSHD"] = (
        f"/usr/sbin/sshd -p {port} -o ListenAddress=127.0.0.1 -o StrictModes=no"
    )
    pod.env["OVERBRAINER_SSHD_WAIT"] = "10"
    ensure_privsep_dir()
    done = pod.run(["dash"])
    pid_file = pod.root / "run" / "overbrainer-sshd.pid"
    try:
        assert done.returncode == 7, done.stdout + done.stderr
        assert pod.handed_over()["failed"] == ""
        wait_for_port(port)
        config = write_ssh_config(pod.keys.ssh_dir, RUN, "127.0.0.1", port, "root")
        home = pod.tmp / "home"
        home.mkdir()
        reached = subprocess.run(
            ["ssh", "-F", str(config), f"overbrainer-{RUN}", "echo on-the-pod"],
            env={"PATH": os.environ["PATH"], "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert reached.returncode == 0, reached.stderr
        assert reached.stdout == "on-the-pod\n"
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text().split()[0]), 15)


def test_pod_env_carries_the_marker_settings_and_keys_only(keys: RunKeys):
    env = pod_env(
        RUN,
        keys,
        run_dir="/workspace/overbrainer/" + RUN,
        max_hours=6.0,
        boot_grace_seconds=1800,
        retrieve_grace_seconds=3600,
        keep=True,
        interval_seconds=0.5,
        api_base="http://127.0.0.1:8123/v2/",
    )
    assert env[RUN_MARKER] == RUN
    # The bound only: nothing of the creating machine's clock goes to the pod.
    assert "OVERBRAINER_DEADLINE" not in env
    assert env["OVERBRAINER_MAX_SECONDS"] == "21600"
    assert env["OVERBRAINER_BOOT_GRACE"] == "1800"
    assert env["OVERBRAINER_RETRIEVE_GRACE"] == "3600"
    assert env["OVERBRAINER_KEEP"] == "1"
    assert env["OVERBRAINER_INTERVAL"] == "0.5"
    fractional = pod_env(
        RUN,
        keys,
        run_dir="overbrainer/" + RUN,
        max_hours=0.5,
        boot_grace_seconds=1800.0,
        retrieve_grace_seconds=0.25,
        keep=False,
    )
    assert fractional["OVERBRAINER_BOOT_GRACE"] == "1800"
    assert fractional["OVERBRAINER_RETRIEVE_GRACE"] == "0.25"
    assert fractional["OVERBRAINER_MAX_SECONDS"] == "1800"
    assert fractional["OVERBRAINER_KEEP"] == "0"
    assert "OVERBRAINER_INTERVAL" not in fractional
    assert "OVERBRAINER_MAX_COST_USD" not in fractional
    assert "OVERBRAINER_COST_PER_HOUR" not in fractional
    assert "OVERBRAINER_API_BASE" not in fractional
    assert env["OVERBRAINER_API_BASE"] == "http://127.0.0.1:8123/v2"
    assert env["OVERBRAINER_AUTHORIZED_KEY"] == keys.client_public_key
    assert base64.b64decode(env["OVERBRAINER_HOST_KEY_B64"]).decode() == keys.host_private_key
    assert not any(name.startswith(("RUNPOD_", "HF_")) for name in env)
    for value in env.values():
        assert "\n" not in value and "\0" not in value
    # Of the secrets, only the host key's private half is there.
    joined = "".join(env.values())
    assert keys.host_private_key.splitlines()[4] not in joined  # only base64-wrapped
    assert len(joined) < 24_000


@pytest.mark.parametrize(
    ("cap", "rate", "said_cap", "said_rate"),
    [
        (1.0, 2.0, "1", "2"),
        (12.5, 0.44, "12.5", "0.44"),
        # The cap rounded down and the rate up: the pod never gets longer than exact.
        (0.4999999, 0.1234561, "0.499999", "0.123457"),
        (1_000_000, 1e-6, "1000000", "0.000001"),
    ],
)
def test_pod_env_carries_the_cost_cap_as_the_watchdog_reads_amounts(
    keys: RunKeys, cap: float, rate: float, said_cap: str, said_rate: str
):
    env = pod_env(
        RUN,
        keys,
        run_dir="overbrainer/" + RUN,
        max_hours=1.0,
        boot_grace_seconds=60,
        retrieve_grace_seconds=60,
        keep=False,
        max_cost_usd=cap,
        expected_cost_per_hour=rate,
    )
    assert env["OVERBRAINER_MAX_COST_USD"] == said_cap
    assert env["OVERBRAINER_COST_PER_HOUR"] == said_rate


def test_pod_env_cannot_take_an_api_key_or_token():
    parameters = inspect.signature(pod_env).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    assert not any(
        word in name for name in parameters for word in ("api_key", "token", "secret", "extra")
    )


@pytest.mark.parametrize(
    "change",
    [
        {"run_dir": ""},
        {"run_dir": "-rf"},
        {"run_dir": "/work/../etc"},
        {"run_dir": "/work/it's"},
        {"run_dir": "/work/a\nb"},
        {"hf_home": "/x y"},
        {"api_base": "http://127.0.0.1:1/v2?x=$(id)"},
        {"boot_grace_seconds": 0},
        {"retrieve_grace_seconds": -5},
        {"boot_grace_seconds": "60"},
        {"interval_seconds": float("nan")},
        {"max_hours": 0.0},
        {"max_cost_usd": 0.0},
        {"max_cost_usd": 1e-7},
        {"max_cost_usd": 2e6},
        {"max_cost_usd": float("inf")},
        {"max_cost_usd": True},
        {"expected_cost_per_hour": -1.0},
    ],
)
def test_pod_env_refuses_unsafe_values(keys: RunKeys, change):
    settings: dict[str, object] = {
        "run_dir": "/workspace/x",
        "max_hours": 1.0,
        "boot_grace_seconds": 60,
        "retrieve_grace_seconds": 60,
        "keep": False,
    }
    settings.update(change)
    with pytest.raises(UnsafePodValue):
        pod_env(RUN, keys, **settings)  # type: ignore[arg-type]


def test_the_container_command_writes_both_scripts_and_execs_the_bootstrap(pod: Pod):
    scripts = pod.tmp / "opt-overbrainer"
    args = pod_args(str(scripts))
    argv = shlex.split(args)
    assert argv[:2] == ["bash", "-c"]
    assert len(pod_args()) < 400
    done = subprocess.run(
        argv,
        env=pod.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 7, done.stdout + done.stderr
    assert (scripts / BOOTSTRAP).read_text() == script_text(BOOTSTRAP)
    assert (scripts / WATCHDOG).read_text() == script_text(WATCHDOG)
    assert pod.handed_over()["failed"] == ""
    assert (pod.root / "etc" / "ssh" / "overbrainer_host_ed25519_key").read_text() == (
        pod.keys.host_private_key
    )


def test_pod_env_carries_the_time_to_save_before_the_deadline(keys: RunKeys):
    def env(save: float) -> dict[str, str]:
        return pod_env(
            RUN,
            keys,
            run_dir="overbrainer/" + RUN,
            max_hours=1.0,
            boot_grace_seconds=60,
            retrieve_grace_seconds=60,
            keep=False,
            save_before_seconds=save,
        )

    assert env(600)["OVERBRAINER_SAVE_BEFORE"] == "600"
    assert env(0.25)["OVERBRAINER_SAVE_BEFORE"] == "0.25"
    assert "OVERBRAINER_SAVE_BEFORE" not in env(0)  # only at the cost cap
    for bad in (3600, 4000, -1, float("nan"), float("inf")):
        with pytest.raises(UnsafePodValue, match="must leave time before max_hours"):
            env(bad)


def test_pod_env_carries_the_stall_rule_of_the_training_settings(keys: RunKeys):
    def env(stall: StallBound | None) -> dict[str, str]:
        return pod_env(
            RUN,
            keys,
            run_dir="overbrainer/" + RUN,
            max_hours=1.0,
            boot_grace_seconds=60,
            retrieve_grace_seconds=60,
            keep=False,
            stall=stall,
        )

    training = TrainingSettings(
        target="gpu", base_model="a/b", adapter="lora", stall_minutes=20, first_step_minutes=45
    )
    carried = env(stall_bound(training))
    assert carried["OVERBRAINER_STALL_SECONDS"] == "1200"
    assert carried["OVERBRAINER_FIRST_STEP_SECONDS"] == "2700"
    # stop_timeout_minutes (5, by default) and 2 min for a follower to end the job first.
    assert carried["OVERBRAINER_STALL_GRACE"] == "420"
    short = training.model_copy(update={"stop_timeout_minutes": 0.5})
    assert env(stall_bound(short))["OVERBRAINER_STALL_GRACE"] == "60"  # 30 s, and as much
    assert env(StallBound(silence=0.5, first_line=2, grace=0.25))["OVERBRAINER_STALL_SECONDS"] == (
        "0.5"
    )
    assert not any("STALL" in name or "FIRST_STEP" in name for name in env(None))
    with pytest.raises(UnsafePodValue, match="stall silence must be a positive number"):
        env(StallBound(silence=float("nan"), first_line=60, grace=60))


@pytest.mark.parametrize(
    ("minutes", "max_hours", "seconds"),
    [
        (10, 4, 600),
        (0, 4, 0),
        (59.5, 1, 3570),
        # A bound shortened below the setting (to fit a cost cap): a quarter of it.
        (10, 0.1, 90),
        (60, 1, 900),
    ],
)
def test_the_save_time_leaves_time_to_train(minutes: float, max_hours: float, seconds: float):
    assert save_before_seconds(minutes, max_hours) == seconds


# Runpod's variables on a cluster's node (rank 1 of 2, 8 GPUs each).
CLUSTER_NODE = {
    "PRIMARY_ADDR": "10.65.0.3",
    "MASTER_ADDR": "10.65.0.3",
    "PRIMARY_PORT": "29500",
    "MASTER_PORT": "29500",
    "NODE_ADDR": "10.65.0.2",
    "NODE_RANK": "1",
    "NUM_NODES": "2",
    "NUM_TRAINERS": "8",
    "HOST_NODE_ADDR": "10.65.0.3:29500",
    "WORLD_SIZE": "16",
}


def _sourced(pod: Pod, shell: list[str], names: list[str]) -> dict[str, str]:
    """What a job sourcing the job's environment file, in an empty environment, sees."""
    show = " ".join(f'"{name}=${{{name}-unset}}"' for name in names)
    sourced = subprocess.run(
        [*shell, "-c", f'. "$1" && printf "%s\\n" {show}', "sh", str(pod.pod_dir / "job.env")],
        env={},
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split("=", 1) for line in sourced.stdout.splitlines())


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
def test_a_cluster_nodes_job_environment_holds_runpods_cluster_variables(pod: Pod, shell):
    pod.env.update(CLUSTER_NODE)
    done = pod.run(shell)
    assert done.returncode == 7, done.stdout + done.stderr
    names = [*CLUSTER_NODE, "NCCL_SOCKET_IFNAME"]
    # Inter-node traffic must use ens1.
    assert _sourced(pod, shell, names) == {**CLUSTER_NODE, "NCCL_SOCKET_IFNAME": "ens1"}
    assert "job environment written (cluster node 1 of 2)" in done.stdout


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
def test_the_creates_nccl_interface_wins_and_values_stay_whole(pod: Pod, shell):
    pod.env.update(CLUSTER_NODE, NCCL_SOCKET_IFNAME="lo", NODE_ADDR="it's $HOME `x`")
    done = pod.run(shell)
    assert done.returncode == 7, done.stdout + done.stderr
    seen = _sourced(pod, shell, ["NCCL_SOCKET_IFNAME", "NODE_ADDR"])
    assert seen == {"NCCL_SOCKET_IFNAME": "lo", "NODE_ADDR": "it's $HOME `x`"}


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
def test_a_single_pods_job_environment_has_no_cluster_variable(pod: Pod, shell):
    # Not a cluster's node: an interface named in the create is not the bootstrap's to pass.
    pod.env.update(NCCL_SOCKET_IFNAME="lo", MASTER_ADDR="localhost")
    done = pod.run(shell)
    assert done.returncode == 7, done.stdout + done.stderr
    names = [*CLUSTER_NODE, "NCCL_SOCKET_IFNAME"]
    assert set(_sourced(pod, shell, names).values()) == {"unset"}
