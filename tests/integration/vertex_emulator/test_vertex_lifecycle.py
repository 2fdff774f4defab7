"""Lifecycle contract: states, times, outcome rules, replica environment and service events, all observed
through aiplatform_v1.JobServiceClient and the Pub/Sub events topic of an emulator in its own process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from google.api_core.exceptions import FailedPrecondition, InvalidArgument, NotFound
from google.cloud.aiplatform_v1 import JobState

from deploy.vertex_emulator import replica_log_paths
from deploy.vertex_emulator.host_env import passed
from trainer.fault_hooks import OOM_VARIABLE

from .harness import PARENT, PROBE_IMAGE, PROJECT, job_id, probe_job, probe_pool, process_alive, read_json
from .probe_job import VERTEX_VARIABLES


def test_job_succeeds_when_the_primary_exits_zero_and_the_worker_is_stopped(vertex, job_events, tmp_path: Path):
    out = tmp_path / "out"
    pools = [probe_pool(out, "--sleep", "0.3"), probe_pool(out, "--sleep", "60", replicas=1)]
    created = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools, labels={"run": "r1"}))

    assert created.name.startswith(f"{PARENT}/customJobs/") and job_id(created).isdigit()
    assert created.state == JobState.JOB_STATE_PENDING
    assert created.create_time and created.update_time
    job = vertex.wait_terminal(created.name)
    assert job.state == JobState.JOB_STATE_SUCCEEDED, job.error
    assert created.create_time <= job.start_time <= job.end_time
    assert not job.error.message
    entries = job_events.wait_for_text(job_id(job), "Job completed successfully.")
    texts = [entry["textPayload"] for entry in entries]
    assert texts == ["Waiting for job to be provisioned.", "Job is running.", "Job completed successfully."]
    entry = entries[-1]
    assert entry["resource"] == {
        "type": "ml_job",
        "labels": {"job_id": job_id(job), "project_id": PROJECT, "task_name": "service"},
    }
    assert entry["severity"] == "INFO" and entry["timestamp"].endswith("Z")
    worker = json.loads((out / "workerpool1-0.json").read_text())
    assert not process_alive(worker["pid"]), "the worker must be stopped"


def test_replica_environment_follows_vertex(vertex, tmp_path: Path):
    out = tmp_path / "out"
    pools = [
        # the job ends when its primary does (as on Vertex): it waits for the workers' records, however slowly a
        # loaded machine starts them
        probe_pool(
            out,
            *("--sleep", "0.2", "--await-replica", "workerpool1-0", "--await-replica", "workerpool1-1"),
            accelerator=("NVIDIA_TESLA_T4", 2),
            env={"PROBE_EXTRA": "x"},
        ),
        probe_pool(out, replicas=2, accelerator=("NVIDIA_TESLA_T4", 2)),
    ]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools))
    done = vertex.wait_terminal(job.name)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error
    primary, first, second = (read_json(out / f"workerpool{n}.json") for n in ("0-0", "1-0", "1-1"))
    assert [r["RANK"] for r in (primary, first, second)] == ["0", "1", "2"]
    assert {r["WORLD_SIZE"] for r in (primary, first, second)} == {"3"}
    assert len({r["MASTER_PORT"] for r in (primary, first, second)}) == 1
    assert primary["MASTER_ADDR"] == "127.0.0.1"
    assert primary["AIP_MODEL_DIR"] == "gs://landfall-local/runs/r1/model/"
    assert primary["AIP_CHECKPOINT_DIR"] == "gs://landfall-local/runs/r1/checkpoints/"
    assert primary["AIP_TENSORBOARD_LOG_DIR"] == "gs://landfall-local/runs/r1/logs/"
    assert primary["CLOUD_ML_JOB_ID"] == job_id(job)
    assert primary["CLOUD_ML_PROJECT_ID"] == PROJECT
    assert primary["LANDFALL_NPROC_PER_NODE"] == "2"
    assert primary["PROBE_EXTRA"] == "x" and second["PROBE_EXTRA"] is None
    cluster = json.loads(second["CLUSTER_SPEC"])
    assert cluster["task"] == {"type": "workerpool1", "index": 1, "trial": ""}
    assert cluster["environment"] == "cloud"
    assert cluster["cluster"]["workerpool0"] == [f"127.0.0.1:{primary['MASTER_PORT']}"]
    assert len(cluster["cluster"]["workerpool1"]) == 2
    assert cluster["job"]["worker_pool_specs"][0]["machine_spec"]["accelerator_type"] == "NVIDIA_TESLA_T4"
    tf_config = json.loads(second["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert set(tf_config["cluster"]) == {"chief", "worker"}
    assert primary["argv"][:2] == ["--out", str(out)]
    seen = set(primary["environment"])
    assert not seen & {"FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "LANDFALL_TEAMS_FILE"}, "the stack's own"
    emulators_own = {"LANDFALL_CODE_ENV_CACHE", "LANDFALL_WORK_DIR"}  # the host's env cache, the replica's disk
    assert {"PATH", "STORAGE_EMULATOR_HOST", OOM_VARIABLE, *emulators_own} <= seen
    assert {name for name in seen if not passed(name)} <= {*VERTEX_VARIABLES, *emulators_own}, seen
    assert {name for name in os.environ if name.startswith("COVERAGE_")} <= seen, "coverage measures replicas"
    logs = replica_log_paths(vertex.state_dir, job_id(job))
    assert list(logs) == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    text = logs["workerpool1-1"].read_text()
    assert "probe workerpool1-1 started" in text and "probe workerpool1-1 stderr line" in text


def test_failing_replica_fails_the_job_with_vertex_error(vertex, job_events, tmp_path: Path):
    out = tmp_path / "out"
    # the worker fails once the primary has started (else, under load, the job may fail before the primary runs)
    failing = probe_pool(out, "--exit", "7", "--exit-replica", "workerpool1-0", "--await-replica", "workerpool0-0")
    pools = [probe_pool(out, "--sleep", "30"), failing]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools))
    done = vertex.wait_terminal(job.name)
    assert done.state == JobState.JOB_STATE_FAILED
    message = "The replica workerpool1-0 exited with a non-zero status of 7. Termination reason: Error."
    assert (done.error.code, done.error.message) == (3, message)
    assert done.end_time
    entries = job_events.wait_for_text(job_id(job), "Job failed.")
    assert [e["textPayload"] for e in entries][-2:] == [message, "Job failed."]
    assert entries[-1]["severity"] == "ERROR"
    primary = read_json(out / "workerpool0-0.json")
    assert not process_alive(primary["pid"]), "the primary must be stopped when a worker fails"


def test_list_filters_by_label(vertex, tmp_path: Path):
    pools = [probe_pool(tmp_path)]
    tagged = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools, labels={"team": "alpha"}))
    other = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools, labels={"team": "beta"}))
    listed = vertex.client.list_custom_jobs(request={"parent": PARENT, "filter": 'labels.team="alpha"'})
    names = [job.name for job in listed]
    assert tagged.name in names and other.name not in names
    for job in (tagged, other):
        vertex.wait_terminal(job.name)


def test_cancel_stops_every_process_of_the_job(vertex, job_events, tmp_path: Path):
    out = tmp_path / "out"
    pools = [probe_pool(out, "--sleep", "60", "--spawn-child"), probe_pool(out, "--sleep", "60", "--spawn-child")]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools))
    vertex.wait_state(job.name, JobState.JOB_STATE_RUNNING)
    records = [read_json(out / f"workerpool{n}.json") for n in ("0-0", "1-0")]
    pids = [pid for record in records for pid in (record["pid"], record["child_pid"])]
    assert all(Path(f"/proc/{pid}").exists() for pid in pids)

    vertex.client.cancel_custom_job(name=job.name)
    assert vertex.client.get_custom_job(name=job.name).state in (
        JobState.JOB_STATE_CANCELLING,
        JobState.JOB_STATE_CANCELLED,
    )
    done = vertex.wait_terminal(job.name)
    assert done.state == JobState.JOB_STATE_CANCELLED
    assert done.error.code == 1 and done.end_time
    assert [pid for pid in pids if process_alive(pid)] == []
    texts = [e["textPayload"] for e in job_events.wait_for_text(job_id(job), "Job was cancelled.")]
    assert texts[-2:] == ["Job is being cancelled.", "Job was cancelled."]


def test_two_nodes_with_two_local_processes_each_see_trainer_ranks(vertex, tmp_path: Path):
    out = tmp_path / "out"
    pools = [
        probe_pool(out, "--processes", "--await-records", "4", accelerator=("NVIDIA_TESLA_V100", 2)),
        probe_pool(out, "--processes", accelerator=("NVIDIA_TESLA_V100", 2)),
    ]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools))
    assert vertex.wait_terminal(job.name).state == JobState.JOB_STATE_SUCCEEDED
    records = [
        read_json(out / f"{replica}-{local}.json") for replica in ("workerpool0-0", "workerpool1-0") for local in (0, 1)
    ]
    assert [r["global_rank"] for r in records] == [0, 1, 2, 3]
    assert {r["world_size"] for r in records} == {4}
    assert len({r["master"] for r in records}) == 1


def test_timeout_fails_the_job_and_stops_its_processes(vertex, tmp_path: Path):
    out = tmp_path / "out"
    pools = [probe_pool(out, "--sleep", "60", "--spawn-child")]
    # 5 s, not 1: the probe must have started (and written its pids) before the timeout stops it; a loaded 2-core
    # machine took more than 1 s to start its Python.
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools, scheduling={"timeout": "5s"}))
    done = vertex.wait_terminal(job.name)
    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.code == 4 and "timeout of 5 seconds" in done.error.message
    record = read_json(out / "workerpool0-0.json")
    assert not process_alive(record["pid"]) and not process_alive(record["child_pid"])


def test_container_spec_runs_a_mapped_image_and_fails_clearly_without_a_mapping(vertex, tmp_path: Path):
    out = tmp_path / "out"
    mapped = {
        "machine_spec": {"machine_type": "n1-standard-4"},
        "replica_count": 1,
        "container_spec": {
            "image_uri": PROBE_IMAGE,
            "args": ["--out", str(out)],
            "env": [{"name": "PROBE_EXTRA", "value": "c"}],
        },
    }
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job([mapped]))
    assert vertex.wait_terminal(job.name).state == JobState.JOB_STATE_SUCCEEDED
    assert read_json(out / "workerpool0-0.json")["PROBE_EXTRA"] == "c"

    unmapped = {**mapped, "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/unknown:1", "command": ["train"]}}
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job([unmapped]))
    done = vertex.wait_terminal(job.name)
    assert done.state == JobState.JOB_STATE_FAILED
    assert 'image "us-docker.pkg.dev/p/r/unknown:1" has no local mapping' in done.error.message
    assert "--images" in done.error.message


def test_reduction_server_pool_is_accepted_and_stands_idle(vertex, tmp_path: Path):
    out = tmp_path / "out"
    reduction = {
        "machine_spec": {"machine_type": "n1-highcpu-16"},
        "replica_count": 2,
        "container_spec": {"image_uri": "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"},
    }
    pools = [probe_pool(out, accelerator=("NVIDIA_TESLA_V100", 1)), probe_pool(out), reduction]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=probe_job(pools))
    assert vertex.wait_terminal(job.name).state == JobState.JOB_STATE_SUCCEEDED
    primary = read_json(out / "workerpool0-0.json")
    assert primary["WORLD_SIZE"] == "2"
    assert len(json.loads(primary["CLUSTER_SPEC"])["cluster"]["workerpool2"]) == 2
    assert list(replica_log_paths(vertex.state_dir, job_id(job))) == ["workerpool0-0", "workerpool1-0"]


def test_delete_removes_an_ended_job_and_refuses_a_running_one(vertex, tmp_path: Path):
    running = vertex.client.create_custom_job(
        parent=PARENT, custom_job=probe_job([probe_pool(tmp_path, "--sleep", "60")])
    )
    # running, its replica started (on a loaded machine a job cancelled while still pending never starts one)
    vertex.wait_state(running.name, JobState.JOB_STATE_RUNNING)
    with pytest.raises(FailedPrecondition, match="Cancel it first"):
        vertex.client.delete_custom_job(name=running.name)
    vertex.client.cancel_custom_job(name=running.name)
    vertex.wait_terminal(running.name)
    with pytest.raises(FailedPrecondition, match="terminal state JOB_STATE_CANCELLED"):
        vertex.client.cancel_custom_job(name=running.name)

    vertex.client.delete_custom_job(name=running.name).result(timeout=10)
    with pytest.raises(NotFound):
        vertex.client.get_custom_job(name=running.name)
    assert running.name not in [job.name for job in vertex.client.list_custom_jobs(parent=PARENT)]
    assert replica_log_paths(vertex.state_dir, job_id(running)), "replica logs are kept after delete"


def test_unknown_and_malformed_names(vertex):
    with pytest.raises(NotFound, match="does not exist"):
        vertex.client.get_custom_job(name=f"{PARENT}/customJobs/123")
    with pytest.raises(InvalidArgument, match="numeric id"):
        vertex.client.get_custom_job(name=f"{PARENT}/customJobs/abc")


def test_output_only_fields_sent_by_the_client_are_ignored(vertex, tmp_path: Path):
    job = probe_job([probe_pool(tmp_path)])
    job.update(
        state="JOB_STATE_SUCCEEDED",
        error={"code": 5, "message": "client-made"},
        start_time="2020-01-01T00:00:00Z",
        name="projects/x/locations/y/customJobs/1",
    )
    created = vertex.client.create_custom_job(parent=PARENT, custom_job=job)
    assert created.state == JobState.JOB_STATE_PENDING
    assert created.name.startswith(f"{PARENT}/customJobs/") and not created.error.message
    assert not created.start_time
    assert vertex.wait_terminal(created.name).state == JobState.JOB_STATE_SUCCEEDED
