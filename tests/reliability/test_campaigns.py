"""A representative subset of the reliability campaigns (``just reliability`` runs them
all): the same harness, the same invariants, a few cases of each kind on each target."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from overbrainer.testing.pg import running_cluster
from reliability import (
    api_faults,
    bad_input,
    clocks,
    machine,
    nodes_lost,
    paths,
    signals,
    store_faults,
)
from reliability.core import Case, Result, run_cases
from reliability.plan import code_site
from reliability.pods import CLUSTER_TRAIN, RunpodWorld
from reliability.world import MachineWorld


def _pick(keys: list[str], mark: str, *, last: bool = False) -> str:
    found = [key for key in keys if mark in key]
    assert found, f"no checkpoint matches {mark!r}"
    return found[-1] if last else found[0]


def _clean(results: list[Result]) -> None:
    bad = {r.name: r.violations for r in results if r.violations}
    assert bad == {}


def _case(name: str, run: Callable[[], list[str]]) -> Case:
    return Case("subset", name, run)


def test_ctrl_c_crash_and_store_faults_on_the_local_target(tmp_path: Path) -> None:
    with MachineWorld("local", tmp_path) as world:
        keys, found = machine.trace(world, "train", "trace")
        assert found == []
        start = _pick(keys, ".spawn:")  # inside the shielded start
        follow = _pick(keys, "service.py:watch")  # inside the raced follow
        cases = [
            _case(
                "sigint start", lambda: machine.inject_case(world, "train", start, "sigint", "a")
            ),
            _case(
                "sigint follow", lambda: machine.inject_case(world, "train", follow, "sigint", "b")
            ),
            _case(
                "sigint2 end",
                lambda: machine.inject_case(
                    world, "train", "append-before run.Ended", "sigint2", "c"
                ),
            ),
            _case(
                "kill job record",
                lambda: machine.inject_case(
                    world, "train", "append-before run.JobStarted", "kill", "d"
                ),
            ),
            _case(
                "disk full at the end",
                lambda: machine.inject_case(
                    world,
                    "train",
                    "append-before run.Ended",
                    "pause",
                    "e",
                    store_faults.disk_full,
                    {0, 1},
                ),
            ),
        ]
        _clean(run_cases(cases, 5))


def test_a_team_store_unreachable_or_stopped_at_an_append(tmp_path: Path) -> None:
    with running_cluster() as cluster, MachineWorld("local", tmp_path) as world:
        keys, found = machine.trace(world, "train", "trace")
        assert found == []
        assert "append-before run.JobStarted" in keys
        cases = [
            c
            for c in store_faults.postgres_cases(world, {"train": keys}, lambda: cluster)
            if "run.JobStarted" in c.name
        ]
        assert sorted(c.name.split(" @")[0] for c in cases) == [
            "local train store postgres stopped",
            "local train store postgres unreachable",
        ]
        _clean(run_cases(cases, 2))


def test_ctrl_c_and_a_dropped_connection_on_the_ssh_target(tmp_path: Path) -> None:
    with MachineWorld("ssh", tmp_path / "world") as world:
        keys, found = machine.trace(world, "train", "trace")
        assert found == []
        follow = _pick(keys, "service.py:watch")
        download = _pick(keys, ".download:")
        cases = [
            _case(
                "sigint follow", lambda: machine.inject_case(world, "train", follow, "sigint", "a")
            ),
            _case(
                "drop during download",
                lambda: store_faults._drop_case(tmp_path / "drop", "train", download, "b"),
            ),
        ]
        _clean(run_cases(cases, 2))


def test_ctrl_c_crash_and_a_vanishing_pod_on_the_runpod_target(tmp_path: Path) -> None:
    with RunpodWorld(tmp_path) as world:
        keys, found = world.trace("train", "trace")
        assert found == []
        machine.remember_order("runpod", "train", keys)
        boot = _pick(keys, "_Walk._boot")  # waiting for the pod: a race inside a shield
        create = _pick(keys, "RunpodClient.create_pod")  # the create in flight
        follow = _pick(keys, "service.py:watch")

        def vanish(project: object) -> None:
            world._vanish_fault(project)  # type: ignore[arg-type]

        cases = [
            _case("sigint boot", lambda: world.run_case("train", boot, "sigint", "a", None)[1]),
            _case("kill create", lambda: world.run_case("train", create, "kill", "b", None)[1]),
            _case("pod vanishes", lambda: world.run_case("train", follow, "pause", "c", vanish)[1]),
        ]
        _clean(run_cases(cases, 3))


def test_ctrl_c_at_code_new_to_clusters_and_a_node_lost_on_a_runpod_cluster(
    tmp_path: Path,
) -> None:
    with RunpodWorld(tmp_path) as world:
        pod_keys, found = world.trace("train", "trace")
        assert found == []
        keys, found = world.trace(CLUSTER_TRAIN, "trace-cluster")
        assert found == []
        machine.remember_order("runpod", CLUSTER_TRAIN, keys)
        quick = world.cluster_ctrl_c_cases(keys, {"train": pod_keys}, full=False)
        full = world.cluster_ctrl_c_cases(keys, {"train": pod_keys}, full=True)
        # Only code a pod's run never passes, each site once by default.
        pod_sites = {code_site(key) for key in pod_keys}
        new = [key for key in keys if code_site(key) not in pod_sites]
        assert len(quick) < len(full) == 2 * len(new)
        names = [case.name for case in quick]
        assert any("_Walk._create_cluster" in name for name in names)
        assert any("NodesExecutor.upload" in name for name in names)
        ranked = [name for name in names if name.endswith("append-after pod.ClusterRanked")]
        assert [name.split()[3] for name in ranked] == ["sigint", "sigint2"]
        create = next(case for case in quick if "_Walk._create_cluster" in case.name)
        picked = [create, next(case for case in quick if case.name == ranked[0])]
        lost = {case.name: case for case in nodes_lost.cases(world, keys)}
        picked.append(lost[f"runpod {CLUSTER_TRAIN}: node 1 vanishes while the job runs"])
        _clean(run_cases(picked, 3))


def test_a_clock_far_off_or_jumping_on_the_runpod_target(tmp_path: Path) -> None:
    with RunpodWorld(tmp_path) as world:
        picked = {
            "runpod train: this machine's clock 3 h behind",
            "runpod train attach: this machine's clock 2 years ahead",
            "runpod train: this machine's clock jumps +2h while its pod is ready",
        }
        cases = [case for case in clocks.cases(world) if case.name in picked]
        assert len(cases) == len(picked)
        _clean(run_cases(cases, 3))


def test_stop_signals_and_broken_outputs_on_the_local_and_runpod_targets(
    tmp_path: Path,
) -> None:
    with MachineWorld("local", tmp_path / "local") as local, RunpodWorld(tmp_path / "rp") as rp:
        keys, found = machine.trace(local, "train", "trace")
        assert found == []
        follow = _pick(keys, "service.py:watch")
        home = _pick(keys, "bring_home")
        pod_keys, found = rp.trace("train", "trace")
        assert found == []
        machine.remember_order("runpod", "train", pod_keys)
        boot = _pick(pod_keys, "_Walk._boot")

        def on_local(key: str, fault: signals.Fault, name: str) -> Case:
            return _case(
                name,
                lambda: machine.inject_case(
                    local, "train", key, fault.action, name, breaks=fault.breaks, how=fault.how
                ),
            )

        cases = [
            on_local(follow, signals.Fault("sigterm"), "sigterm-follow"),
            # `2>&1 | tee log` and Ctrl-C while the results come home: two in a row stop it.
            on_local(home, signals.Fault("sigint2", signals.BOTH, "epipe"), "tee-home"),
            on_local("append-before run.Ended", signals.Fault("sighup2"), "sighup2-end"),
            # `| head` done while following: the run goes on to its end, exit 0.
            on_local(follow, signals.Fault("none", ("stdout",), "epipe"), "head-follow"),
            # The terminal gone while the pod boots: the pod is deleted, as for Ctrl-C.
            _case(
                "terminal gone at boot",
                lambda: rp.run_case(
                    "train", boot, "sighup", "hup-boot", None, breaks=signals.BOTH, how="eio"
                )[1],
            ),
        ]
        _clean(run_cases(cases, 5))


def test_every_code_site_gets_one_new_fault_and_every_fault_many_sites() -> None:
    traced = {
        "train": [f"await a.py:f:{i} > b.py:g:{i}" for i in range(40)]
        + [f"append-before e{i}" for i in range(12)],
    }
    planned = signals.planned("ssh", traced, full=False)
    assert len(planned) == 52 == len({key for _, key, _ in planned})  # one per site
    kinds = {fault for _, _, fault in planned}
    assert kinds == set(signals.AT_AWAITS) | set(signals.AT_APPENDS)
    assert {f.campaign for f in kinds} == {"signals", "outputs"}
    full = signals.planned("ssh", traced, full=True)
    assert len(full) == 52 * len(signals.EVERYWHERE)


def test_a_project_at_a_non_ascii_quoted_spaced_path_on_the_ssh_target(tmp_path: Path) -> None:
    with MachineWorld("ssh", tmp_path / "w", paths.SUBDIRS["ssh"]) as world:
        keys, found = machine.trace(world, "train", "trace")
        assert found == []
        follow = _pick(keys, "service.py:watch")
        cases = [
            _case("sigint", lambda: machine.inject_case(world, "train", follow, "sigint", "a")),
            _case(
                "kill",
                lambda: machine.inject_case(
                    world, "train", "append-before run.JobStarted", "kill", "b"
                ),
            ),
        ]
        _clean(run_cases(cases, 2))
        (case,) = (tmp_path / "w" / "cases").glob("trace")
        assert (case / paths.SUBDIRS["ssh"] / "project" / "runs").is_dir()


def test_a_clock_far_off_or_jumping_on_the_local_target(tmp_path: Path) -> None:
    with MachineWorld("local", tmp_path) as world:
        picked = {
            "local train: this machine's clock 2 years ahead",
            "local train: this machine's clock jumps -2h while following",
        }
        cases = [case for case in clocks.machine_cases(world) if case.name in picked]
        assert len(cases) == len(picked)
        _clean(run_cases(cases, 2))


def test_runpod_api_faults() -> None:
    picked = [
        ("POST /pods", "500", "once"),
        ("POST /pods", "connection reset", "always"),
        ("GET /pods/{id}", "timeout", "always"),
        ("GET /pods", "malformed JSON", "once"),
        ("DELETE /pods/{id}", "429 Retry-After", "once"),
        ("DELETE /pods/{id}", "404 not Runpod's", "always"),
    ]
    for endpoint, kind, span in picked:
        assert api_faults.run_fault(endpoint, kind, span) == [], (endpoint, kind, span)


def test_bad_input_properties_hold_on_a_few_examples() -> None:
    cases = [
        Case("bad-input", name, lambda name=name: bad_input.run_worker(name, 6))  # type: ignore[misc]
        for name in bad_input.EXAMPLES
    ]
    results = run_cases(cases, 4)
    _clean(results)
    assert all(r.count >= 1 for r in results)


_HOME = "overbrainer/lifecycle/checkpoints_home.py"
_LOOP = f"await {_HOME}:CheckpointFetcher.run:92 > {_HOME}:CheckpointFetcher._fetch_due:104"
_FINISH = (
    "await overbrainer/cli/train_cmd.py:{entry} > overbrainer/lifecycle/run.py:_follow:177"
    f" > overbrainer/lifecycle/run.py:_watch:247 > {_HOME}:CheckpointFetcher.finish:98"
    f" > {_HOME}:CheckpointFetcher._fetch_due:104"
)
_RETRIEVAL = [
    f" > {_HOME}:CheckpointFetcher._fetch_each:109 > {_HOME}:CheckpointFetcher.fetch:135"
    f" > {_HOME}:CheckpointFetcher._download:{line}"
    for line in (147, 148, 153)
]


def test_a_checkpoint_fetch_is_one_code_site_per_target_whichever_save_and_command() -> None:
    from reliability import plan

    # The same retrieval of each save: from the fetcher's loop while the job runs, and
    # from the end of following, in `train` and in `train attach`.
    train = [_LOOP + inner for inner in _RETRIEVAL] + [
        _FINISH.format(entry="train:257") + inner for inner in _RETRIEVAL
    ]
    attach = [_FINISH.format(entry="_with_run:132") + inner for inner in _RETRIEVAL]
    other = (
        "await overbrainer/cli/train_cmd.py:train:257 > overbrainer/lifecycle/service.py:watch:3"
    )
    traced = {"train": [*train, other, "append-before run.CheckpointRetrieved"], "attach": attach}
    sites = {plan.code_site(key) for key in [*train, *attach]}
    assert len(sites) == len(_RETRIEVAL)
    assert all(plan.in_retrieval(key) for key in [*train, *attach])
    assert not plan.in_checkpoint_fetch(other) and not plan.in_retrieval(_LOOP)

    once, twice = plan.sample("ssh", traced, full=False)
    # The loop's, the first through each site; an append gets two Ctrl-C in a row.
    assert once == {"train": [*train[:3], other, traced["train"][-1]], "attach": []}
    assert twice == {"train": [traced["train"][-1]], "attach": []}
    # The local target: every other checkpoint both ways, the fetch's once per site.
    once, twice = plan.sample("local", traced, full=False)
    assert once == twice == {"train": [*train[:3], other, traced["train"][-1]], "attach": []}
    # --full: every checkpoint, both ways.
    assert plan.sample("ssh", traced, full=True) == (traced, traced)


def test_every_site_inside_a_checkpoints_retrieval_gets_sigterm() -> None:
    awaits = [f"await a.py:f:{i} > b.py:g:{i}" for i in range(5)]
    traced = {"train": [awaits[0], *(_LOOP + inner for inner in _RETRIEVAL), *awaits[1:]]}
    planned = signals.planned("ssh", traced, full=False)
    faults = {key: fault for _, key, fault in planned}
    assert [faults[_LOOP + inner] for inner in _RETRIEVAL] == [
        signals.Fault("sigterm"),
        signals.Fault("sigterm2"),
        signals.Fault("sigterm"),
    ]
    # The other sites take their turns as before.
    assert [faults[key] for key in awaits] == list(signals.AT_AWAITS[:5])
