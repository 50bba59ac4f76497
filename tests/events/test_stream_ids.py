"""A run's stream ID is the version-5 UUID of its run ID in overbrainer's namespace: a log
written by any version of overbrainer finds its runs by the same IDs."""

import uuid

from overbrainer.events.stream_ids import stream_id

NAMESPACE = uuid.UUID("5f1a4a3e-6a0b-4f8e-9a86-0b5d3c1f2e77")


def test_the_stream_id_is_the_uuid5_of_the_run_id() -> None:
    run_ids = [
        "20260101-000000-aaaa",
        "20991231-235959-ffff",
        "20260101-000000-ffff",
        "",
        "x" * 200,
        "ünïcödé",
        *(f"2025{i:04d}-{i:06d}-{i:04x}" for i in range(0, 5000, 7)),
    ]
    for run_id in run_ids:
        expected = uuid.uuid5(NAMESPACE, run_id)
        assert stream_id(run_id) == expected
        assert stream_id(run_id).version == 5
