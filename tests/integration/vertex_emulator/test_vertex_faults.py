"""Faults on demand, set with the control call or the --faults file, observed through the JobService client."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.api_core.exceptions import InvalidArgument, ResourceExhausted, ServiceUnavailable
from google.cloud.aiplatform_v1 import JobState

from deploy.vertex_emulator import control
from deploy.vertex_emulator.events import preempted_line

from .harness import PARENT, PROJECT, job_id, probe_job, probe_pool, process_alive, read_json

H100 = ("NVIDIA_H100_80GB", 8)
QUOTA = "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_"


def _h100_job(out: Path, **kwargs) -> dict:
    return probe_job([probe_pool(out, machine_type="a3-highgpu-8g", accelerator=H100)], **kwargs)


def test_quota_exhaustion_refuses_create_for_the_chosen_gpu_and_region(vertex, tmp_path):
    control.set_faults(
        vertex.address, {"quota_exhausted": [{"accelerator_type": "NVIDIA_H100_80GB", "region": "us-central1"}]}
    )
    with pytest.raises(ResourceExhausted) as refused:
        vertex.client.create_custom_job(parent=PARENT, custom_job=_h100_job(tmp_path))
    assert refused.value.message == QUOTA + "nvidia_h100_gpus"
    with pytest.raises(ResourceExhausted) as refused:
        vertex.client.create_custom_job(parent=PARENT, custom_job=_h100_job(tmp_path, scheduling={"strategy": "SPOT"}))
    assert refused.value.message == QUOTA + "preemptible_nvidia_h100_gpus"
    elsewhere = vertex.client.create_custom_job(
        parent=f"projects/{PROJECT}/locations/europe-west4", custom_job=_h100_job(tmp_path / "elsewhere")
    )
    other_gpu = vertex.client.create_custom_job(
        parent=PARENT, custom_job=probe_job([probe_pool(tmp_path / "t4", accelerator=("NVIDIA_TESLA_T4", 1))])
    )
    for job in (elsewhere, other_gpu):
        assert vertex.wait_terminal(job.name).state == JobState.JOB_STATE_SUCCEEDED


def test_stockout_fails_the_job_without_running_it(vertex, job_events, tmp_path):
    control.set_faults(vertex.address, {"stockout": [{"accelerator_type": "NVIDIA_L4"}]})
    pools = [probe_pool(tmp_path, machine_type="g2-standard-8", accelerator=("NVIDIA_L4", 1))]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools))
    done = vertex.wait_terminal(job.name)
    message = (
        "Resources are insufficient in region: us-central1. Try a different region or use a different accelerator."
    )
    assert done.state == JobState.JOB_STATE_FAILED
    assert (done.error.code, done.error.message) == (8, message)
    assert not (tmp_path / "workerpool0-0.json").exists()
    texts = [e["textPayload"] for e in job_events.wait_for_text(job_id(job), "Job failed.")]
    assert "Job is running." not in texts and message in texts


def test_machine_type_unsupported_in_a_region(vertex, tmp_path):
    control.set_faults(
        vertex.address, {"unsupported_machine_type": [{"machine_type": "a3-highgpu-8g", "region": "us-central1"}]}
    )
    with pytest.raises(InvalidArgument) as refused:
        vertex.client.create_custom_job(parent=PARENT, custom_job=_h100_job(tmp_path))
    assert refused.value.message == 'Machine type "a3-highgpu-8g" is not supported.'


def test_transient_unavailable_on_the_next_calls(vertex):
    control.set_faults(vertex.address, {"unavailable_calls": 2})
    for _ in range(2):
        with pytest.raises(ServiceUnavailable):
            vertex.client.list_custom_jobs(parent=PARENT)
    assert control.get_faults(vertex.address)["unavailable_calls_left"] == 0
    vertex.client.list_custom_jobs(parent=PARENT)


def test_spot_preemption_restarts_replicas_with_the_same_environment(vertex, job_events, tmp_path):
    # Preempted 2 s after it starts: under load (three busy test workers on two cores) a replica's interpreter and
    # its child can take more than a second to start, and a replica preempted before it wrote its record leaves
    # nothing to compare the restart with.
    control.set_faults(vertex.address, {"spot_preemption": {"after_seconds": 2.0, "times": 1, "grace_seconds": 0.5}})
    out = tmp_path / "out"
    pools = [probe_pool(out, "--sleep", "3.0", "--count-starts", "--spawn-child")]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools, scheduling={"strategy": "SPOT"}))
    done = vertex.wait_terminal(job.name)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error
    starts = (out / "workerpool0-0.starts").read_text().split()
    assert len(starts) == 2
    first, second = (read_json(out / f"workerpool0-0.start{n}.json") for n in (1, 2))
    assert [first["pid"], second["pid"]] == [int(pid) for pid in starts]
    assert {k: v for k, v in second.items() if k.isupper()} == {k: v for k, v in first.items() if k.isupper()}
    assert not process_alive(first["child_pid"]), "the preempted replica's children are stopped too"
    texts = [e["textPayload"] for e in job_events.wait_for_text(job_id(job), "Job completed successfully.")]
    assert any("preempted" in text for text in texts)


def test_spot_preemption_past_vertex_restart_limit_is_a_stockout(vertex, job_events, tmp_path):
    control.set_faults(vertex.address, {"spot_preemption": {"after_seconds": 1.0, "times": 7, "grace_seconds": 0.1}})
    pools = [probe_pool(tmp_path, "--sleep", "30", "--count-starts")]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools, scheduling={"strategy": "SPOT"}))
    done = vertex.wait_terminal(job.name, timeout=60)
    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.message.startswith("Resources are insufficient in region: us-central1.")
    # Six restarts, then the seventh preemption ends the job. The replica's own count of its starts is at most 7:
    # a start that has not written its pid within 1 s (a loaded machine) is preempted before it counts itself. At
    # 0.4 s no start of the seven counted itself twice in a row beside a load test (load 20; the replica is a Python
    # process under the suite's coverage).
    entries = job_events.wait_for_text(job_id(job), preempted_line(6))
    assert sum("were preempted" in entry["textPayload"] for entry in entries) == 6
    assert 2 <= len((tmp_path / "workerpool0-0.starts").read_text().split()) <= 7


def test_standard_jobs_are_not_preempted(vertex, tmp_path):
    control.set_faults(vertex.address, {"spot_preemption": {"after_seconds": 0.1}})
    pools = [probe_pool(tmp_path, "--sleep", "0.6", "--count-starts")]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools))
    assert vertex.wait_terminal(job.name).state == JobState.JOB_STATE_SUCCEEDED
    assert len((tmp_path / "workerpool0-0.starts").read_text().split()) == 1


def test_invalid_fault_plan_is_refused_and_the_old_plan_stays(vertex):
    control.set_faults(vertex.address, {"unavailable_calls": 0, "stockout": [{"region": "r1"}]})
    with pytest.raises(grpc.RpcError) as refused:
        control.set_faults(vertex.address, {"stockouts": []})
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Unknown fault(s) stockouts" in (refused.value.details() or "")
    assert control.get_faults(vertex.address)["plan"] == {"stockout": [{"region": "r1"}]}


def test_faults_file_is_read_at_start_and_again_when_it_changes(start_emulator, tmp_path):
    plan = tmp_path / "faults.toml"
    plan.write_text('[[quota_exhausted]]\naccelerator_type = "NVIDIA_H100_80GB"\n')
    emulator = start_emulator("--faults", str(plan))
    with pytest.raises(ResourceExhausted):
        emulator.client.create_custom_job(parent=PARENT, custom_job=_h100_job(tmp_path))
    plan.write_text("unavailable_calls = 1\n")
    with pytest.raises(ServiceUnavailable):
        emulator.client.create_custom_job(parent=PARENT, custom_job=_h100_job(tmp_path))
    job = emulator.client.create_custom_job(parent=PARENT, custom_job=_h100_job(tmp_path))
    assert emulator.wait_terminal(job.name).state == JobState.JOB_STATE_SUCCEEDED


def test_bad_faults_file_stops_the_emulator_with_a_clear_error(tmp_path):
    from .harness import launch_emulator

    plan = tmp_path / "faults.json"
    plan.write_text('{"spot_preemption": {"after": 1}}')
    with pytest.raises(AssertionError, match="spot_preemption: unknown key"):
        launch_emulator(tmp_path / "state", tmp_path / "emulator.log", ["--faults", str(plan)])


def test_rate_limits_answer_resource_exhausted_with_the_quota_metric_per_region_and_method(vertex, tmp_path):
    """A JobService method over its per-minute limit in a region answers as Vertex does, with
    ErrorInfo and QuotaFailure in the status details, which Landfall reads as a rate limit, not capacity."""
    from functions.gcp.vertex import RateLimitedError, translate_error

    control.set_faults(
        vertex.address,
        {"rate_limits": [{"method": "ListCustomJobs", "limit": 2, "region": "us-central1", "window_seconds": 60}]},
    )
    for _ in range(2):
        vertex.client.list_custom_jobs(parent=PARENT)
    with pytest.raises(ResourceExhausted) as refused:
        vertex.client.list_custom_jobs(parent=PARENT)
    error = refused.value
    assert error.message.startswith("Quota exceeded for quota metric 'Resource management (CRUD) requests'")
    assert error.reason == "RATE_LIMIT_EXCEEDED" and error.domain == "googleapis.com"
    assert error.metadata["quota_metric"] == "aiplatform.googleapis.com/resource_management_requests"
    assert error.metadata["quota_location"] == "us-central1" and error.metadata["quota_limit_value"] == "2"
    assert any(getattr(d, "violations", None) for d in error.details), "a QuotaFailure rides along"
    assert isinstance(translate_error(error, "ListCustomJobs", "us-central1"), RateLimitedError)
    vertex.client.list_custom_jobs(parent=f"projects/{PROJECT}/locations/europe-west4")  # another region: its own
    counts = control.get_faults(vertex.address)["calls"]
    assert isinstance(counts, dict) and counts["ListCustomJobs us-central1"] == {"calls": 2, "refused": 1}


def test_a_create_rate_limit_refuses_creation_and_creates_nothing(vertex, tmp_path):
    control.set_faults(vertex.address, {"rate_limits": [{"method": "CreateCustomJob", "limit": 1}]})
    first = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job([probe_pool(tmp_path / "a")]))
    with pytest.raises(ResourceExhausted) as refused:
        vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job([probe_pool(tmp_path / "b")]))
    assert refused.value.metadata["quota_metric"] == "aiplatform.googleapis.com/job_submission_requests"
    names = {job.name for job in vertex.client.list_custom_jobs(parent=PARENT)}
    assert first.name in names and not (tmp_path / "b").exists()
    assert vertex.wait_terminal(first.name).state == JobState.JOB_STATE_SUCCEEDED


def test_calls_per_minute_and_jobs_in_flight_are_read_without_counting(vertex, tmp_path):
    """What `make load` reads: GetFaults counts each method's calls per minute, and GetJobsInFlight names
    the jobs not ended with their GPUs (all replicas); neither control call counts against a rate limit."""
    control.set_faults(vertex.address, {"rate_limits": [{"method": "CreateCustomJob", "limit": 1}]})
    pools = [
        probe_pool(tmp_path / "a", "--sleep", "30", accelerator=("NVIDIA_TESLA_T4", 2)),
        probe_pool(tmp_path / "a", "--sleep", "30", replicas=2, accelerator=("NVIDIA_TESLA_T4", 1)),
    ]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools, labels={"landfall-run-id": "r"}))
    with pytest.raises(ResourceExhausted):
        vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job([probe_pool(tmp_path / "b")]))
    for _ in range(3):
        flying = [j for j in control.get_jobs_in_flight(vertex.address) if j["labels"] == {"landfall-run-id": "r"}]
    assert [(j["name"], j["gpus"]) for j in flying] == [(job.name, {"NVIDIA_TESLA_T4": 4})]
    minutes = control.get_faults(vertex.address)["per_minute"]
    assert isinstance(minutes, dict) and set(minutes) == {"CreateCustomJob us-central1"}
    cells = minutes["CreateCustomJob us-central1"].values()
    assert (sum(c["calls"] for c in cells), sum(c["refused"] for c in cells)) == (1, 1)
    vertex.client.cancel_custom_job(name=job.name)
    assert vertex.wait_terminal(job.name).state == JobState.JOB_STATE_CANCELLED
    assert job.name not in {j["name"] for j in control.get_jobs_in_flight(vertex.address)}
