"""CreateCustomJob refuses what Vertex refuses, with INVALID_ARGUMENT and Vertex-like messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.api_core.exceptions import InvalidArgument

from .harness import PARENT, probe_job, probe_pool

OUT = Path("/nonexistent")


def _pool(**machine) -> dict:
    pool = probe_pool(OUT)
    pool["machine_spec"] = machine
    return pool


@pytest.mark.parametrize(
    ("job", "field", "message"),
    [
        (probe_job([probe_pool(OUT)], display_name=""), "display_name", "Required field is not set."),
        (probe_job([probe_pool(OUT)], display_name="x" * 129), "display_name", "at most 128 characters"),
        (
            probe_job([probe_pool(OUT, replicas=2)]),
            "job_spec.worker_pool_specs[0].replica_count",
            "exactly 1 replica, found 2",
        ),
        (
            probe_job([{}, probe_pool(OUT)]),
            "job_spec.worker_pool_specs[0]",
            "primary worker pool (index 0) is required",
        ),
        (
            probe_job([_pool(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=2)]),
            "job_spec.worker_pool_specs[0].machine_spec.accelerator_count",
            "comes with 1 x NVIDIA_TESLA_A100",
        ),
        (
            probe_job([_pool(machine_type="g2-standard-24", accelerator_type="NVIDIA_L4", accelerator_count=1)]),
            "job_spec.worker_pool_specs[0].machine_spec.accelerator_count",
            "comes with 2 x NVIDIA_L4",
        ),
        (
            probe_job([_pool(machine_type="n1-standard-8", accelerator_type="NVIDIA_TESLA_T4", accelerator_count=8)]),
            "job_spec.worker_pool_specs[0].machine_spec.accelerator_count",
            "Supported counts: 1, 2, 4",
        ),
        (
            probe_job(
                [_pool(machine_type="n1-standard-32", accelerator_type="NVIDIA_TESLA_V100", accelerator_count=1)]
            ),
            "job_spec.worker_pool_specs[0].machine_spec.accelerator_count",
            "at most 12 vCPUs",
        ),
        (
            probe_job([_pool(machine_type="e2-standard-8", accelerator_type="NVIDIA_TESLA_T4", accelerator_count=1)]),
            "job_spec.worker_pool_specs[0].machine_spec.accelerator_type",
            'Accelerator "NVIDIA_TESLA_T4" is not supported for machine type "e2-standard-8".',
        ),
        (
            probe_job([_pool(machine_type="n1-standard-4", accelerator_type="NVIDIA_TESLA_T4")]),
            "job_spec.worker_pool_specs[0].machine_spec.accelerator_type",
            "Both `accelerator_type` and `accelerator_count` should be specified or none.",
        ),
        (
            probe_job([_pool(machine_type="z9-mega-1")]),
            "job_spec.worker_pool_specs[0].machine_spec.machine_type",
            'Machine type "z9-mega-1" is not supported.',
        ),
        (probe_job([probe_pool(OUT)], labels={"Team": "a"}), "labels['Team']", 'Invalid label key "Team"'),
        (probe_job([probe_pool(OUT)], labels={"team": "A B"}), "labels['team']", 'Invalid label value "A B"'),
        (probe_job([probe_pool(OUT)], labels={"k" * 65: "v"}), "labels", "keys must be 1 to 64 characters"),
        (probe_job([probe_pool(OUT)], labels={"1team": "v"}), "labels['1team']", "start with a lowercase letter"),
        (
            probe_job([probe_pool(OUT)], base_output="/tmp/out"),
            "job_spec.base_output_directory.output_uri_prefix",
            "must be a Cloud Storage URI",
        ),
    ],
)
def test_refused_spec(vertex, job, field, message):
    with pytest.raises(InvalidArgument) as refused:
        vertex.client.create_custom_job(parent=PARENT, custom_job=job)
    text = refused.value.message
    assert text.startswith("List of found errors:\t1.Field: ")
    assert f"Field: {field}" in text and message in text


def test_all_problems_are_listed_at_once(vertex):
    job = probe_job([probe_pool(OUT, replicas=3)], display_name="", labels={"Bad": "x"})
    with pytest.raises(InvalidArgument) as refused:
        vertex.client.create_custom_job(parent=PARENT, custom_job=job)
    assert "1.Field: display_name" in refused.value.message
    assert "2.Field: labels['Bad']" in refused.value.message
    assert "3.Field: job_spec.worker_pool_specs[0].replica_count" in refused.value.message


def test_refused_job_is_not_created(vertex):
    before = {job.name for job in vertex.client.list_custom_jobs(parent=PARENT)}
    with pytest.raises(InvalidArgument):
        vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job([probe_pool(OUT)], display_name=""))
    assert {job.name for job in vertex.client.list_custom_jobs(parent=PARENT)} == before


@pytest.mark.parametrize(
    ("machine", "accelerator"),
    [
        ("a3-highgpu-8g", ("NVIDIA_H100_80GB", 8)),
        ("n1-highmem-8", ("NVIDIA_TESLA_V100", 1)),
        ("g2-standard-8", ("NVIDIA_L4", 1)),
        ("n1-standard-96", ("NVIDIA_TESLA_T4", 4)),
    ],
)
def test_accepted_machine_shapes(vertex, tmp_path, machine, accelerator):
    job = vertex.client.create_custom_job(
        parent=PARENT, custom_job=probe_job([probe_pool(tmp_path, machine_type=machine, accelerator=accelerator)])
    )
    done = vertex.wait_terminal(job.name)
    assert done.state.name == "JOB_STATE_SUCCEEDED"
    assert (tmp_path / "workerpool0-0.json").exists()
