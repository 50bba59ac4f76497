"""The run's data on the project's network volume, by content, through the REAL
``overbrainer`` command in the fake world (fake Runpod API and pods on loopback, the real
bootstrap): without an S3 API key it goes up through the pod, with one through the S3 API
(moto's server on loopback) before the pod is created; either way an unchanged file goes
up once, and the pod's run directory links to it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from overbrainer.runpod.volume_layout import blob_key, run_output_key
from overbrainer.testing.fake_executor import CANARY_KEY
from tests.runpod.conftest import S3Server
from tests.runpod.s3_world import S3Volumes
from tests.runpod.test_train_loopback import HF_CANARY, World, world
from tests.runpod.test_volume_checkpoints_loopback import checkpoint_files_on_disk, first_step

VOLUME = {
    "OVERBRAINER_TARGETS__GPU__VOLUME": "cache",
    "OVERBRAINER_TARGETS__GPU__VOLUME_DATA_CENTER": "US-KS-2",
    "OVERBRAINER_TARGETS__GPU__VOLUME_SIZE_GB": "20",
}
ACCESS_CANARY = "user_CANARYs3access0123456789abcdef"
SECRET_CANARY = "rps_CANARYs3secret0123456789abcdefghijkl"
DATA = ("data/train.jsonl", "data/eval.jsonl")
SAVING = "FAKE_AXOLOTL_SAVE_EVERY=5 FAKE_AXOLOTL_CHECKPOINT_KB=16"


def _with_eval(w: World) -> None:
    """An eval set (the project's is empty), so both data files are the run's."""
    first = (w.project / "data" / "train.jsonl").read_text().splitlines()[0]
    (w.project / "data" / "eval.jsonl").write_text(first + "\n")


async def _events(w: World, run_id: str) -> list[dict[str, object]]:
    """The run's events as ``events RUN --json`` prints them."""
    done = await w.run("events", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _placed(events: list[dict[str, object]]) -> tuple[int, dict[str, object]]:
    """Where the run's ``pod.DataOnVolume`` is in its log, and its fields."""
    (index,) = [i for i, e in enumerate(events) if e["event"] == "pod.DataOnVolume"]
    fields = events[index]["fields"]
    assert isinstance(fields, dict)
    return index, fields


def _names(events: list[dict[str, object]]) -> list[object]:
    return [e["event"] for e in events]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _data_on_pod(w: World, run_id: str) -> dict[str, Path]:
    """Each data file of the run's directory on its pod: the link there, resolved."""
    pod_id = str(w.pod_json(run_id)["pod_id"])
    found = {}
    for rel in DATA:
        link = w.pod_run_dir(pod_id, run_id) / rel
        assert link.is_symlink(), f"{rel} on the pod is not a link to the volume"
        found[rel] = link.resolve()
    return found


async def test_without_an_s3_key_the_data_goes_through_the_pod_once_per_volume(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=3) as w:
        _with_eval(w)
        first = await w.run("train", env=VOLUME)
        assert first.returncode == 0, first.stderr
        (run_a,) = w.runs()
        (volume,) = w.fake.live_volumes(CANARY_KEY)
        blobs = {
            rel: w.pods.volume_dir(volume.id) / blob_key(_sha256(w.project / rel)) for rel in DATA
        }
        before = {rel: blob.stat() for rel, blob in blobs.items()}
        second = await w.run("train", env=VOLUME)
        assert second.returncode == 0, second.stderr
        run_b = next(r for r in w.runs() if r != run_a)
        on_a, on_b = _data_on_pod(w, run_a), _data_on_pod(w, run_b)
        logs = [await _events(w, run) for run in (run_a, run_b)]

    for rel in DATA:
        local = w.project / rel
        sha = _sha256(local)
        size = local.stat().st_size
        # Both pods' run directories link to the one blob, which holds the file.
        assert on_a[rel] == on_b[rel] == blobs[rel].resolve()
        assert blobs[rel].read_bytes() == local.read_bytes()
        said = f"train: {rel} on the network volume as blob {sha[:12]} through the pod, verified"
        assert f"{said}: sent ({size} bytes)" in first.stderr
        assert f"{said}: already there" in second.stderr
        # The second run wrote nothing there: the very same file, untouched.
        after = blobs[rel].stat()
        assert (after.st_ino, after.st_mtime_ns) == (before[rel].st_ino, before[rel].st_mtime_ns)
    assert "through the S3 API" not in first.stderr + second.stderr
    # The log says it: once the pod was ready, before the job; sent by the first run only.
    for log, sent in zip(logs, (True, False), strict=True):
        at, fields = _placed(log)
        names = _names(log)
        assert names.index("pod.Ready") < at < names.index("run.JobStarted")
        assert fields["via"] == "pod"
        assert fields["files"] == [
            {
                "path": rel,
                "sha256": _sha256(w.project / rel),
                "size": (w.project / rel).stat().st_size,
                "sent": sent,
            }
            for rel in DATA
        ]


async def test_with_an_s3_key_the_data_is_on_the_volume_and_verified_before_the_create(
    tmp_path: Path, open_s3: S3Server
) -> None:
    keys = {
        **VOLUME,
        "OVERBRAINER_RUNPOD__S3_ACCESS_KEY": ACCESS_CANARY,
        "OVERBRAINER_RUNPOD__S3_SECRET": SECRET_CANARY,
        "OVERBRAINER_RUNPOD__S3_BASE_URL": open_s3.url,
    }
    async with world(tmp_path, steps=3) as w:
        _with_eval(w)
        s3 = S3Volumes(open_s3, w.fake, w.pods)
        s3.install()
        first = await w.run("train", env=keys)
        assert first.returncode == 0, first.stderr
        (run_a,) = w.runs()
        between = len(s3.requests())
        second = await w.run("train", env=keys)
        assert second.returncode == 0, second.stderr
        run_b = next(r for r in w.runs() if r != run_a)
        on_b = _data_on_pod(w, run_b)
        logs = [await _events(w, run) for run in (run_a, run_b)]
        stories = [
            await w.run("events", run, *more)
            for run in (run_a, run_b)
            for more in ((), ("--json",))
        ]
        (volume,) = w.fake.live_volumes(CANARY_KEY)
        pods = [str(w.pod_json(run)["pod_id"]) for run in (run_a, run_b)]
        envs = [w.fake.pod_env(pod) for pod in pods]

    bucket = f"/{volume.id}/"
    wanted = {}
    for rel in DATA:
        local = w.project / rel
        sha, size = _sha256(local), local.stat().st_size
        wanted[blob_key(sha)] = {"size": size, "sha256": sha}
        said = f"train: {rel} on the network volume as blob {sha[:12]} through the S3 API, verified"
        assert f"{said}: sent ({size} bytes)" in first.stderr
        assert f"{said}: already there" in second.stderr
        # The second pod's run directory links to the blob, which holds the file.
        assert on_b[rel] == (w.pods.volume_dir(volume.id) / blob_key(sha)).resolve()
        assert on_b[rel].read_bytes() == local.read_bytes()
    assert "through the pod" not in first.stderr + second.stderr
    # When each create arrived, the blobs were on the volume with their SHA-256; before the
    # first, each had been sent (PUT), then read back (HEAD).
    assert len(s3.at_create) == 2
    for seen in s3.at_create:
        assert seen.objects == {volume.id: wanted}
    sent = [r.rsplit(" ", 1)[0] for r in s3.at_create[0].requests if bucket in r]
    for key in wanted:
        put, head = f"PUT {bucket}{key}", f"HEAD {bucket}{key}"
        assert sent.count(put) == 1
        assert head in sent[sent.index(put) :]
    # The log says it, before the first create of each run; sent by the first run only.
    data_bytes = sum((w.project / rel).stat().st_size for rel in DATA)
    for log, sent in zip(logs, (True, False), strict=True):
        at, fields = _placed(log)
        assert at < _names(log).index("pod.AttemptSent")
        # The upload's bound came first (another host allows the starter's silence it).
        (attached,) = [e["fields"] for e in log if e["event"] == "pod.VolumeAttached"]
        assert attached["fill_seconds"] == 60 + data_bytes / (1 << 20)  # type: ignore[index]
        assert fields["via"] == "s3" and fields["checkpoint"] is None
        files = fields["files"]
        assert isinstance(files, list)
        assert [(f["path"], f["sent"]) for f in files] == [(rel, sent) for rel in DATA]
    # The second run sent nothing: no PUT reached the S3 server after the first.
    assert not [r for r in s3.requests()[between:] if r.startswith("PUT ")]
    # Canaries: neither S3 key in any output, event, request, pod environment or file.
    texts = [first.stdout, first.stderr, second.stdout, second.stderr]
    texts += [story.stdout for story in stories]
    texts.append(json.dumps([r.json for r in w.fake.requests]))
    texts += [json.dumps(env) for env in envs]
    for path in w.project.rglob("*"):
        if path.is_file() and "ssh" not in path.relative_to(w.project).parts[2:3]:
            texts.append(path.read_bytes().decode(errors="replace"))
    for pod in pods:
        for path in w.pods.root(pod).rglob("*"):
            if path.is_file():
                texts.append(path.read_bytes().decode(errors="replace"))
    assert len(texts) > 40
    for text in texts:
        for canary in (ACCESS_CANARY, SECRET_CANARY):
            assert canary[5:20] not in text
        assert HF_CANARY[3:16] not in text


def _s3_env(server: S3Server, access: str, secret: str) -> dict[str, str]:
    return {
        **VOLUME,
        "OVERBRAINER_RUNPOD__S3_ACCESS_KEY": access,
        "OVERBRAINER_RUNPOD__S3_SECRET": secret,
        "OVERBRAINER_RUNPOD__S3_BASE_URL": server.url,
    }


async def test_with_an_s3_key_a_resume_checkpoint_from_home_is_on_the_volume_before_the_create(
    tmp_path: Path, open_s3: S3Server
) -> None:
    keys = _s3_env(open_s3, ACCESS_CANARY, SECRET_CANARY)
    async with world(tmp_path, steps=10, knobs=SAVING) as w:
        s3 = S3Volumes(open_s3, w.fake, w.pods)
        s3.install()
        # The first run has no volume: its checkpoints are at home only.
        first = await w.run("train")
        assert first.returncode == 0, first.stderr
        (run_a,) = w.runs()
        resumed = await w.run("train", "--resume-from", f"{run_a}:5", env=keys)
        assert resumed.returncode == 0, resumed.stderr
        run_b = w.runs()[-1]
        log = await _events(w, run_b)
        (volume,) = w.fake.live_volumes(CANARY_KEY)
        on_pod = w.pod_run_dir(str(w.pod_json(run_b)["pod_id"]), run_b)

    checkpoint = w.project / "runs" / run_a / "output" / "checkpoint-5"
    prefix = f"{run_output_key(run_a)}/checkpoint-5"
    files = {
        f"{prefix}/{p.relative_to(checkpoint).as_posix()}": {
            "size": p.stat().st_size,
            "sha256": _sha256(p),
        }
        for p in checkpoint.rglob("*")
        if p.is_file()
    }
    assert files
    # All of it on the volume, verified, when the resumed run's pod was created.
    (second_seen,) = (seen.objects[volume.id] for seen in s3.at_create[1:])
    assert {k: v for k, v in second_seen.items() if k.startswith(prefix)} == files
    assert (
        f"train: resume checkpoint-5 of run {run_a} on the network volume ({prefix}) through "
        f"the S3 API, verified: {len(files)} files sent"
    ) in resumed.stderr
    at, fields = _placed(log)
    assert at < _names(log).index("pod.AttemptSent")
    assert fields["checkpoint"] == {
        "run": run_a,
        "step": 5,
        "prefix": prefix,
        "files": len(files),
        "sent": len(files),
        "bytes_sent": sum(int(v["size"]) for v in files.values()),
    }
    # The job read it there: nothing of it went through the pod, and it trained on from
    # the step after it.
    assert (
        f"train: run {run_b} resumes from checkpoint-5 of run {run_a} on network volume cache "
        "(it matches what the S3 API was sent): not sent again through the pod"
    ) in resumed.stderr
    assert w.run_json(run_b)["resumed_from"] == {"run": run_a, "step": 5, "from_volume": True}
    assert (on_pod / "resume").is_symlink()
    assert checkpoint_files_on_disk(on_pod) == []
    assert first_step(on_pod / "metrics.jsonl") == 6


async def test_with_an_s3_key_a_checkpoint_its_run_saved_on_the_volume_is_not_sent_again(
    tmp_path: Path, open_s3: S3Server
) -> None:
    keys = _s3_env(open_s3, ACCESS_CANARY, SECRET_CANARY)
    # Every checkpoint home too (with a volume only the last comes by default).
    keys["OVERBRAINER_TARGETS__GPU__CHECKPOINTS_HOME"] = "all"
    async with world(tmp_path, steps=10, knobs=SAVING) as w:
        s3 = S3Volumes(open_s3, w.fake, w.pods)
        s3.install()
        first = await w.run("train", env=keys)
        assert first.returncode == 0, first.stderr
        (run_a,) = w.runs()
        between = len(s3.requests())
        resumed = await w.run("train", "--resume-from", f"{run_a}:5", env=keys)
        assert resumed.returncode == 0, resumed.stderr
        run_b = w.runs()[-1]
        log = await _events(w, run_b)
        on_pod = w.pod_run_dir(str(w.pod_json(run_b)["pod_id"]), run_b)

    # The first run's job saved checkpoint-5 on the volume and recorded it: the resumed run
    # sent none of it, through S3 or the pod.
    prefix = f"{run_output_key(run_a)}/checkpoint-5"
    assert not [r for r in s3.requests()[between:] if r.startswith("PUT ") and prefix in r]
    _, fields = _placed(log)
    assert fields["checkpoint"] is None
    assert (
        f"train: run {run_b} resumes from checkpoint-5 of run {run_a} on network volume cache "
        "(it matches its recorded manifest): nothing uploaded from home"
    ) in resumed.stderr
    assert f"resume checkpoint-5 of run {run_a} on the network volume" not in resumed.stderr
    assert checkpoint_files_on_disk(on_pod) == []
    assert first_step(on_pod / "metrics.jsonl") == 6


async def test_an_s3_key_the_s3_api_refuses_fails_the_run_before_any_pod(
    tmp_path: Path, strict_s3: S3Server
) -> None:
    keys = _s3_env(strict_s3, ACCESS_CANARY, SECRET_CANARY)
    async with world(tmp_path, steps=3) as w:
        S3Volumes(strict_s3, w.fake, w.pods).install()
        done = await w.run("train", env=keys)
        (run_id,) = w.runs()
        names = await w.events(run_id)

    assert done.returncode != 0
    assert w.fake.create_requests() == []
    assert "cannot put run" in done.stderr and "HTTP 403" in done.stderr
    assert "OVERBRAINER_RUNPOD__S3_ACCESS_KEY" in done.stderr
    assert ACCESS_CANARY[5:20] not in done.stderr and SECRET_CANARY[5:20] not in done.stderr
    assert "pod.AttemptSent" not in names and names[-1] == "run.Ended"


async def test_a_blob_on_the_volume_that_does_not_hold_its_file_is_sent_again(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=3) as w:
        _with_eval(w)
        first = await w.run("train", env=VOLUME)
        assert first.returncode == 0, first.stderr
        (volume,) = w.fake.live_volumes(CANARY_KEY)
        train, evals = (w.project / rel for rel in DATA)
        # A torn write left the eval set's blob short (the name says the content it lacks).
        torn = w.pods.volume_dir(volume.id) / blob_key(_sha256(evals))
        torn.write_bytes(evals.read_bytes()[:-5])
        again = await w.run("train", env=VOLUME)
        assert again.returncode == 0, again.stderr

    said = "on the network volume as blob {} through the pod, verified"
    assert f"data/train.jsonl {said.format(_sha256(train)[:12])}: already there" in again.stderr
    assert (
        f"data/eval.jsonl {said.format(_sha256(evals)[:12])}: sent ({evals.stat().st_size} bytes)"
    ) in again.stderr
    assert torn.read_bytes() == evals.read_bytes()
