"""A scripted history that uses every event type of the catalogue, across five runs."""

from overbrainer.events import types as ev

RUN_A = "20260101-100000-aaaa"  # a kept Runpod run: attempts (the first as older versions
# recorded them, with a deadline on the client's clock), a stray, detach, retrieval
RUN_B = "20260101-110000-bbbb"  # a cancelled local run whose artifacts came later
RUN_C = "20260101-120000-cccc"  # a Runpod run interrupted while provisioning, started
# from a machine whose clock was 3 h behind (an older version's log otherwise)
RUN_D = "20260101-130000-dddd"  # a local run resumed from RUN_B's checkpoint that stalled,
# stopped by a request taken by its follower, its checkpoint home (an earlier one brought
# home, pruned)
RUN_E = "20260101-140000-eeee"  # a local run that succeeded, its files removed (runs rm)
RUN_F = "20260101-150000-ffff"  # a Runpod run whose pod vanished after a checkpoint came
# home: recovered on a second pod, resumed from that checkpoint, succeeded; both pods on
# the project's network volume (made for the first): the first job downloaded the base
# model into its cache, the second found it there

# Event types added since 0.3.0, whose log (``logs/v0.3.0.sqlite``) holds the rest of the
# script as it is.
ADDED_SINCE_0_3_0: frozenset[type[ev.Event]] = frozenset(
    {ev.CandidatesChosen, ev.ClusterCreated, ev.ClusterRanked}
)

SCRIPT: list[tuple[str, ev.Event]] = [
    (
        RUN_A,
        ev.RunCreated(
            run_id=RUN_A,
            target="gpu",
            kind="runpod",
            remote_dir="overbrainer/a",
            settings_digest="d1",
            base_model="Qwen/Qwen3-0.6B",
            adapter="lora",
            keep_pod=True,
        ),
    ),
    (
        RUN_A,
        ev.CandidatesChosen(
            source="list",
            candidates=[
                {
                    "gpu_type": "NVIDIA A100",
                    "price_per_hour": 1.19,
                    "max_hours": 5.04,
                    "shortened": True,
                    "stock": "LOW",
                },
                {
                    "gpu_type": "NVIDIA A40",
                    "price_per_hour": 0.53,
                    "max_hours": 6.0,
                    "shortened": False,
                    "stock": None,
                },
            ],
            left=[
                {
                    "gpu_type": "NVIDIA H100",
                    "reason": "one hour at $2.99/h exceeds max_cost_usd $6.00",
                }
            ],
            max_hours=6.0,
            max_cost_usd=6.0,
        ),
    ),
    (RUN_A, ev.KeysGenerated(host_public_key="ssh-ed25519 AAAAhost")),
    (
        RUN_A,
        ev.AttemptSent(
            n=1,
            pod_name=f"overbrainer-{RUN_A}-1",
            gpu_type="NVIDIA A100",
            deadline="2026-01-01T16:00:00Z",
        ),
    ),
    (RUN_A, ev.AttemptResolved(n=1, result="no_capacity", detail="no A100 in EU-RO-1")),
    (
        RUN_A,
        ev.AttemptSent(
            n=2, pod_name=f"overbrainer-{RUN_A}-2", gpu_type="NVIDIA A40", max_hours=6.0
        ),
    ),
    (RUN_A, ev.AttemptResolved(n=2, result="created", pod_id="k3x9")),
    (
        RUN_A,
        ev.PodCreated(
            pod_id="k3x9",
            gpu_type="NVIDIA A40",
            data_center="EU-RO-1",
            cost_per_hour=0.53,
            created_at="2026-01-01T10:00:05Z",
            deadline="2026-01-01T16:00:05Z",
        ),
    ),
    (RUN_A, ev.StrayRecorded(pod_id="dup1", reason="duplicate of an ambiguous create")),
    (RUN_A, ev.PodDeleting(pod_id="dup1", reason="duplicate")),
    (RUN_A, ev.StrayDropped(pod_id="dup1")),
    (RUN_A, ev.EndpointSeen(pod_id="k3x9", host="203.0.113.7", port=22022, user="root")),
    (RUN_A, ev.PodReady(pod_id="k3x9", verdict="ready")),
    (RUN_A, ev.JobStarted(job_dir="overbrainer/a", pid=4242)),
    (RUN_A, ev.PodJobRunning(pod_id="k3x9")),
    (RUN_A, ev.Detached(reason="interrupted", metrics={"step": 3, "max_steps": 10})),
    (RUN_A, ev.AwaitingRetrieval(pod_id="k3x9", detail="output/adapter.bin did not verify")),
    (RUN_A, ev.ArtifactsRetrieved(files=4, bytes=1234, manifest_digest="m1")),
    (
        RUN_A,
        ev.RunEnded(
            state="succeeded",
            exit_code=0,
            metrics={"step": 10, "max_steps": 10, "loss": 0.5, "eval_loss": 0.7},
        ),
    ),
    (RUN_A, ev.PodKept(pod_id="k3x9")),
    (RUN_A, ev.PodDeleting(pod_id="k3x9", reason="requested")),
    (RUN_A, ev.PodDeleted(pod_id="k3x9", by="pod_rm", uptime_seconds=3600.0, spend=0.53)),
    (
        RUN_B,
        ev.RunCreated(
            run_id=RUN_B,
            target="here",
            kind="local",
            remote_dir="runs/b",
            settings_digest="d2",
            base_model="m",
            adapter="full",
        ),
    ),
    (RUN_B, ev.JobStarted(job_dir="runs/b", pid=77)),
    (RUN_B, ev.CancelRequested()),
    (RUN_B, ev.RunEnded(state="cancelled", message="cancelled by the user")),
    (RUN_B, ev.NoteAdded(note="artifacts not retrieved")),
    (RUN_B, ev.ArtifactsRetrieved(files=2, bytes=10, manifest_digest="m2")),
    (RUN_B, ev.NoteCleared()),
    (
        RUN_C,
        ev.RunCreated(
            run_id=RUN_C,
            target="gpu",
            kind="runpod",
            remote_dir="overbrainer/c",
            settings_digest="d3",
        ),
    ),
    (RUN_C, ev.ClockOffset(offset_seconds=-10800.0)),
    (RUN_C, ev.KeysGenerated(host_public_key="ssh-ed25519 AAAAother")),
    (
        RUN_C,
        ev.AttemptSent(
            n=1,
            pod_name=f"overbrainer-{RUN_C}-1",
            gpu_type="NVIDIA A40",
            deadline="2026-01-01T18:00:00Z",
        ),
    ),
    (RUN_C, ev.AttemptResolved(n=1, result="created", pod_id="zz9")),
    (RUN_C, ev.PodCreated(pod_id="zz9", gpu_type="NVIDIA A40", cost_per_hour=0.5)),
    (RUN_C, ev.ClusterCreated(cluster_id="c_zz", pod_id="zz9", nodes=2, gpus_per_node=1)),
    (
        RUN_C,
        ev.ClusterRanked(
            cluster_id="c_zz",
            members=[
                {"pod_id": "zz9", "rank": 0, "ip": "10.65.0.2"},
                {"pod_id": "zz8", "rank": 1, "ip": "10.65.0.3"},
            ],
        ),
    ),
    (RUN_C, ev.Interrupted(stage="waiting for SSH")),
    (RUN_C, ev.PodDeleting(pod_id="zz9", reason="interrupted")),
    (RUN_C, ev.PodDeleted(pod_id="zz9", by="client", uptime_seconds=30.0, spend=0.0042)),
    (RUN_C, ev.RunEnded(state="failed", message="interrupted before the job started")),
]

# Event types added later still, each in a run of its own.
RUN_D_SCRIPT: list[tuple[str, ev.Event]] = [
    (
        RUN_D,
        ev.RunCreated(
            run_id=RUN_D,
            target="here",
            kind="local",
            remote_dir="runs/d",
            settings_digest="d4",
            base_model="m",
            adapter="full",
            resumed_from={"run": RUN_B, "step": 4},
            processes=2,
            parallelism="ddp",
        ),
    ),
    # The checkpoint it resumes from was found on the network volume, as recorded.
    (RUN_D, ev.ResumedFromVolume(source=RUN_B, step=4)),
    (RUN_D, ev.JobStarted(job_dir="runs/d", pid=88)),
    (RUN_D, ev.Followed()),
    # Brought home while the job ran, then pruned once a later one came (keep 1).
    (RUN_D, ev.CheckpointRetrieved(step=5, path="output/checkpoint-5")),
    # Then it stalled (no line for 20 minutes after step 5); asked to save, it did.
    (RUN_D, ev.Stalled(silent_minutes=20.0, last_step=5)),
    (RUN_D, ev.StopRequested(relay="asked")),
    (RUN_D, ev.StopRequested(relay="taken")),
    (RUN_D, ev.ArtifactsRetrieved(files=9, bytes=900, manifest_digest="m4")),
    (RUN_D, ev.CheckpointRetrieved(step=6, path="output/checkpoint-6")),
    (RUN_D, ev.CheckpointPruned(step=5, path="output/checkpoint-5")),
    (
        RUN_D,
        ev.RunEnded(
            state="stopped",
            message="saved checkpoint-6 and stopped, as asked",
            exit_code=0,
            metrics={"step": 6, "max_steps": 12},
        ),
    ),
]


RUN_E_SCRIPT: list[tuple[str, ev.Event]] = [
    (
        RUN_E,
        ev.RunCreated(
            run_id=RUN_E, target="here", kind="local", remote_dir="runs/e", settings_digest="d5"
        ),
    ),
    (RUN_E, ev.JobStarted(job_dir="runs/e", pid=99)),
    (RUN_E, ev.CheckpointRetrieved(step=3, path="output/checkpoint-3")),
    (RUN_E, ev.ArtifactsRetrieved(files=2, bytes=200, manifest_digest="m5")),
    (RUN_E, ev.RunEnded(state="succeeded", exit_code=0, metrics={"step": 3, "loss": 0.5})),
    (RUN_E, ev.FilesRemoved(bytes=1_234_567)),
]


def _since_0_3_0(script: list[tuple[str, ev.Event]]) -> list[tuple[str, ev.Event]]:
    """``script`` with the event types added since 0.3.0 (whose log ``SCRIPT`` is), each
    where it happens in its run."""
    out: list[tuple[str, ev.Event]] = []
    for run_id, event in script:
        out.append((run_id, event))
        if run_id == RUN_A and isinstance(event, ev.AttemptResolved) and event.n == 1:
            # The walk waited for capacity before it tried again.
            awaited = ev.CapacityAwaited(
                walks=1,
                seconds=30.0,
                until="2026-01-01T10:30:00Z",
                gpu_types=["NVIDIA A100", "NVIDIA A40"],
                data_centers=["EU-RO-1"],
            )
            out.append((RUN_A, awaited))
        if run_id == RUN_A and isinstance(event, ev.PodJobRunning):
            near = ev.CostCapNear(pod_id="k3x9", max_cost_usd=3.0, cost_per_hour=0.53)
            out.append((RUN_A, near))
            # This machine's monotonic clock jumped 2 h while following: nothing was done.
            out.append((RUN_A, ev.ClockJumped(seconds=7200.0)))
        if run_id == RUN_A and isinstance(event, ev.PodDeleted):
            # What Runpod billed: final for the run's pod, not yet for its stray.
            out.append(
                (
                    RUN_A,
                    ev.PodBilled(
                        pod_id="k3x9",
                        amount=0.5301,
                        period_start="2026-01-01T10:00:00Z",
                        period_end="2026-01-01T12:00:00Z",
                        final=True,
                        read_at="2026-01-01T12:30:00Z",
                    ),
                )
            )
            out.append(
                (
                    RUN_A,
                    ev.PodBilled(
                        pod_id="dup1",
                        amount=0.0012,
                        period_start="2026-01-01T10:00:00Z",
                        period_end="2026-01-01T11:00:00Z",
                        final=False,
                    ),
                )
            )
    return out


RUN_F_SCRIPT: list[tuple[str, ev.Event]] = [
    (
        RUN_F,
        ev.RunCreated(
            run_id=RUN_F,
            target="gpu",
            kind="runpod",
            remote_dir="overbrainer/f",
            settings_digest="d6",
            base_model="Qwen/Qwen3-0.6B",
            adapter="lora",
        ),
    ),
    (RUN_F, ev.KeysGenerated(host_public_key="ssh-ed25519 AAAAf1")),
    (
        RUN_F,
        ev.VolumeAttached(
            volume_id="vf1", volume_name="cache", data_center="EU-RO-1", created=True, size_gb=50
        ),
    ),
    (
        RUN_F,
        ev.DataOnVolume(
            via="s3",
            files=[
                {"path": "data/train.jsonl", "sha256": "a" * 64, "size": 2048, "sent": True},
                {"path": "data/eval.jsonl", "sha256": "b" * 64, "size": 300, "sent": False},
            ],
            bytes_sent=2048,
            checkpoint={
                "run": RUN_B,
                "step": 4,
                "prefix": f"overbrainer/runs/{RUN_B}/output/checkpoint-4",
                "files": 3,
                "sent": 2,
                "bytes_sent": 900,
            },
        ),
    ),
    (RUN_F, ev.AttemptSent(n=1, pod_name=f"overbrainer-{RUN_F}-1", gpu_type="NVIDIA A40")),
    (RUN_F, ev.AttemptResolved(n=1, result="created", pod_id="f1")),
    (RUN_F, ev.PodCreated(pod_id="f1", gpu_type="NVIDIA A40", cost_per_hour=0.5)),
    (RUN_F, ev.PodReady(pod_id="f1", verdict="ready")),
    (RUN_F, ev.JobStarted(job_dir="overbrainer/f", pid=11)),
    (RUN_F, ev.PodJobRunning(pod_id="f1")),
    (RUN_F, ev.ModelReady(cached=False, seconds=41.2, at="2026-01-01T15:02:00Z")),
    (RUN_F, ev.CheckpointRetrieved(step=4, path="output/checkpoint-4")),
    # The job saved it on the volume too, recorded whole there.
    (
        RUN_F,
        ev.CheckpointOnVolume(step=4, path="output/checkpoint-4", files=3, manifest_digest="c4"),
    ),
    (RUN_F, ev.PodDeleted(pod_id="f1", by="found_gone", uptime_seconds=600.0, spend=0.0833)),
    (
        RUN_F,
        ev.Recovering(
            reason="pod f1 no longer exists", attempt=1, max_recoveries=3, pod_id="f1", last_step=6
        ),
    ),
    (RUN_F, ev.KeysGenerated(host_public_key="ssh-ed25519 AAAAf2")),
    (
        RUN_F,
        ev.VolumeAttached(
            volume_id="vf1", volume_name="cache", data_center="EU-RO-1", created=False, size_gb=50
        ),
    ),
    (RUN_F, ev.AttemptSent(n=2, pod_name=f"overbrainer-{RUN_F}-2", gpu_type="NVIDIA A40")),
    (RUN_F, ev.AttemptResolved(n=2, result="created", pod_id="f2")),
    (RUN_F, ev.PodCreated(pod_id="f2", gpu_type="NVIDIA A40", cost_per_hour=0.5)),
    (RUN_F, ev.PodReady(pod_id="f2", verdict="ready")),
    (RUN_F, ev.JobStarted(job_dir="overbrainer/f", pid=12)),
    (RUN_F, ev.PodJobRunning(pod_id="f2")),
    (RUN_F, ev.Recovered(attempt=1, pod_id="f2", resumed_step=4, lost_steps=2)),
    (RUN_F, ev.ModelReady(cached=True, seconds=1.6, at="2026-01-01T15:20:00Z")),
    (RUN_F, ev.ArtifactsRetrieved(files=3, bytes=300, manifest_digest="m6")),
    (RUN_F, ev.RunEnded(state="succeeded", exit_code=0, metrics={"step": 10, "loss": 0.4})),
    (RUN_F, ev.PodDeleting(pod_id="f2", reason="retrieved")),
    (RUN_F, ev.PodDeleted(pod_id="f2", by="client", uptime_seconds=900.0, spend=0.125)),
]


EVERY_TYPE: list[tuple[str, ev.Event]] = [
    *_since_0_3_0(SCRIPT),
    *RUN_D_SCRIPT,
    *RUN_E_SCRIPT,
    *RUN_F_SCRIPT,
]
"""``SCRIPT`` and the event types added since, in order: every type of the catalogue."""

SCRIPT_0_3: list[tuple[str, ev.Event]] = [
    (run, event) for run, event in SCRIPT if type(event) not in ADDED_SINCE_0_3_0
]
"""What overbrainer 0.3.0 recorded (``logs/v0.3.0.sqlite`` holds it as 0.3.0 did)."""
